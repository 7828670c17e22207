#include "worker/agent/rank_log.h"

#include <sys/stat.h>

#include <algorithm>
#include <cstdlib>
#include <fstream>

#include "common/file_util.h"

namespace moe::worker {

std::string RankLogPath(const std::string& runtime_dir, const std::string& job_id, int attempt,
                        int rank) {
  return JoinPath(JoinPath(JoinPath(runtime_dir, "logs"), job_id),
                  "a" + std::to_string(attempt) + "-r" + std::to_string(rank) + ".log");
}

RankLogWriter::~RankLogWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

void RankLogWriter::Append(const std::string& whole) {
  if (failed_) return;
  // A line longer than a reply can carry is cut with a marker: a reader never stalls on it.
  const std::string line = whole.size() <= kMaxLineBytes
                               ? whole
                               : whole.substr(0, kMaxLineBytes) + " [... " +
                                     std::to_string(whole.size() - kMaxLineBytes) +
                                     " more bytes cut from this line]";
  const bool rotate = f_ != nullptr && size_ + static_cast<int64_t>(line.size()) + 1 > rotate_;
  if (rotate) {  // keep one previous part: path.1; offsets go on counting (path.base: bytes before
                 // path)
    std::fclose(f_);
    f_ = nullptr;
    std::rename(path_.c_str(), (path_ + ".1").c_str());
    base_ += size_;
    size_ = 0;
    (void)WriteFileAtomic(path_ + ".base", std::to_string(base_));
  }
  if (f_ == nullptr) {
    if (!rotate && !MakeDirs(path_.substr(0, path_.find_last_of('/'))).ok()) {
      failed_ = true;
      return;
    }
    f_ = std::fopen(path_.c_str(), rotate ? "w" : "a");
    if (f_ == nullptr) {
      failed_ = true;
      return;
    }
    struct stat st {};
    if (!rotate && ::fstat(fileno(f_), &st) == 0) size_ = st.st_size;
  }
  std::fputs(line.c_str(), f_);
  std::fputc('\n', f_);
  std::fflush(f_);
  size_ += static_cast<int64_t>(line.size()) + 1;
}

StatusOr<LogSlice> ReadRankLog(const std::string& path, int64_t offset, int tail_lines,
                               int64_t max_bytes) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError("no log file " + path);
  int64_t base = 0;  // offsets count every byte written, rotated parts included
  if (auto b = ReadFileToString(path + ".base"); b.ok())
    base = std::strtoll(b->c_str(), nullptr, 10);
  in.seekg(0, std::ios::end);
  const int64_t size = static_cast<int64_t>(in.tellg());
  // Before this part (rotated away) or past its end: from its start.
  int64_t start = offset < base || offset - base > size ? 0 : offset - base;
  if (tail_lines > 0) start = std::max<int64_t>(0, size - max_bytes);
  const int64_t n = std::min(max_bytes, size - start);
  std::string text(static_cast<size_t>(n), '\0');
  in.seekg(start);
  in.read(text.data(), n);
  text.resize(static_cast<size_t>(in.gcount()));
  LogSlice out;
  if (tail_lines > 0) {  // from the start of the tail_lines-th line before the end
    size_t pos = text.size();
    if (pos > 0 && text.back() == '\n') --pos;
    for (int count = 0; pos > 0;) {
      const size_t nl = text.rfind('\n', pos - 1);
      if (nl == std::string::npos) {
        pos = 0;
      } else if (++count == tail_lines) {
        pos = nl + 1;
        break;
      } else {
        pos = nl;
      }
    }
    out.text = text.substr(pos);
    out.next_offset = base + start + n;
    return out;
  }
  const size_t last = text.rfind('\n');  // whole lines only: a partial one waits for its end
  text.resize(last == std::string::npos ? 0 : last + 1);
  out.next_offset = base + start + static_cast<int64_t>(text.size());
  out.text = std::move(text);
  return out;
}

}  // namespace moe::worker
