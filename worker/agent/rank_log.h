// A rank's output kept on its worker, for `moectl logs`: one file per rank and attempt,
// <runtime-dir>/logs/<job id>/a<attempt>-r<rank>.log, rotated once it passes a size (the previous
// part kept as .1), read back by offset or as the last lines.
#pragma once

#include <cstdint>
#include <cstdio>
#include <string>

#include "common/status.h"

namespace moe::worker {

std::string RankLogPath(const std::string& runtime_dir, const std::string& job_id, int attempt,
                        int rank);

// Appends lines; not thread-safe (the rank's monitor thread is its only writer).
class RankLogWriter {
 public:
  // Lines are kept up to this many bytes; the rest of a longer one is cut, with a marker that says
  // so.
  static constexpr size_t kMaxLineBytes = 64 << 10;
  RankLogWriter(std::string path, int64_t rotate_bytes = int64_t{64} << 20)
      : path_(std::move(path)), rotate_(rotate_bytes) {}
  ~RankLogWriter();
  void Append(
      const std::string& line);  // failures only cost the file: the worker's own log has every line

 private:
  std::string path_;
  int64_t rotate_;
  std::FILE* f_ = nullptr;
  int64_t size_ = 0;  // of the current part
  int64_t base_ = 0;  // bytes in the parts before it
  bool failed_ = false;
};

struct LogSlice {
  std::string text;  // whole lines
  int64_t next_offset = 0;
};

// What follows `offset` (at most `max_bytes`, ending at a line break), or with tail_lines > 0 the
// last that many lines. Offsets count every byte the rank wrote, across rotations; one in a part
// rotated away, or past the end, reads from the current part's start. NOT_FOUND when there is no
// such file.
StatusOr<LogSlice> ReadRankLog(const std::string& path, int64_t offset, int tail_lines,
                               int64_t max_bytes = int64_t{1} << 20);

}  // namespace moe::worker
