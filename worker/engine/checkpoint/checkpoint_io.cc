#include "worker/engine/checkpoint/checkpoint_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/file_util.h"
#include "kernels/elementwise.h"

namespace moe::checkpoint {

const char* const kCheckpointFormat = "moe-checkpoint/2";

namespace {

constexpr char kMagic[8] = {'M', 'O', 'E', 'S', 'H', 'R', 'D', '2'};

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

StatusOr<DType> ParseDType(const std::string& name) {
  for (DType d : {DType::kF32, DType::kF64, DType::kBF16}) {
    if (name == DTypeName(d)) return d;
  }
  return DataLossError("unknown dtype '" + name + "'");
}

Node PieceHeader(const std::string& name, DType dtype, const std::vector<int64_t>& global_shape,
                 int64_t begin, int64_t count, int64_t offset) {
  Node t = Node::Map();
  t.Set("name", Node::Scalar(name, true));
  t.Set("dtype", Node::Scalar(DTypeName(dtype), true));
  Node shape = Node::List();
  for (int64_t d : global_shape) shape.Append(Node::Scalar(std::to_string(d)));
  t.Set("shape", std::move(shape));
  t.Set("begin", Node::Scalar(std::to_string(begin)));
  t.Set("count", Node::Scalar(std::to_string(count)));
  t.Set("offset", Node::Scalar(std::to_string(offset)));
  return t;
}

Status PreadAll(int fd, char* dst, size_t bytes, int64_t offset, const std::string& path) {
  size_t done = 0;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, dst + done, bytes - done,
                              static_cast<off_t>(offset + static_cast<int64_t>(done)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0)
      return DataLossError(path + ": short read at byte " +
                           std::to_string(offset + static_cast<int64_t>(done)));
    done += static_cast<size_t>(n);
  }
  return OkStatus();
}

// The fixed part of a shard: magic, header length, header.
std::string ShardPrefix(int rank, int64_t step, const std::vector<HostPiece>& pieces) {
  Node header = Node::Map();
  header.Set("rank", Node::Scalar(std::to_string(rank)));
  header.Set("step", Node::Scalar(std::to_string(step)));
  Node list = Node::List();
  int64_t offset = 0;
  for (const auto& p : pieces) {
    MOE_CHECK(p.begin >= 0 && p.begin + p.count <= Numel(p.global_shape))
        << "checkpoint piece " << p.name << " out of range";
    list.Append(PieceHeader(p.name, p.dtype, p.global_shape, p.begin, p.count, offset));
    offset += p.count * static_cast<int64_t>(DTypeSize(p.dtype));
  }
  header.Set("pieces", std::move(list));
  const std::string json = ToJson(header);
  std::string out(kMagic, 8);
  const uint32_t hlen = static_cast<uint32_t>(json.size());
  out.append(reinterpret_cast<const char*>(&hlen), 4);
  return out + json;
}

}  // namespace

Status WriteShardFile(const std::string& path, int rank, int64_t step,
                      const std::vector<TensorPiece>& pieces) {
  std::vector<HostPiece> layout;  // the header's view of the pieces (their bytes follow)
  size_t bytes = 0;
  for (const auto& p : pieces) {
    layout.push_back({p.name, p.global_shape, p.begin, p.data.numel(), p.data.dtype(), nullptr});
    bytes += p.data.nbytes();
  }
  std::string out = ShardPrefix(rank, step, layout);
  out.reserve(out.size() + bytes + 4);
  for (const auto& p : pieces) {
    const size_t at = out.size();
    out.resize(at + p.data.nbytes());
    if (p.data.device().is_cpu())
      std::memcpy(out.data() + at, p.data.raw(), p.data.nbytes());
    else
      GetAllocator(p.data.device())->CopyToHost(out.data() + at, p.data.raw(), p.data.nbytes());
  }
  const uint32_t crc = Crc32(out.data(), out.size());
  out.append(reinterpret_cast<const char*>(&crc), 4);
  return WriteFileAtomic(path, out);
}

namespace {

Status WriteAll(int fd, const char* data, size_t bytes, const std::string& path) {
  size_t off = 0;
  while (off < bytes) {
    const ssize_t n = ::write(fd, data + off, bytes - off);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) return ErrnoError("write " + path, errno);
    off += static_cast<size_t>(n);
  }
  return OkStatus();
}

// The bytes of a shard into an open file, in chunks, the CRC computed on the way.
Status StreamShard(int fd, const std::string& tmp, const std::string& prefix,
                   const std::vector<HostPiece>& pieces,
                   const std::function<Status()>& after_chunk) {
  constexpr size_t kChunk = size_t{8} << 20;
  MOE_RETURN_IF_ERROR(WriteAll(fd, prefix.data(), prefix.size(), tmp));
  uint32_t crc = Crc32(prefix.data(), prefix.size());
  for (const auto& p : pieces) {
    const size_t bytes = static_cast<size_t>(p.count) * DTypeSize(p.dtype);
    for (size_t at = 0; at < bytes; at += kChunk) {
      const size_t n = std::min(kChunk, bytes - at);
      MOE_RETURN_IF_ERROR(WriteAll(fd, p.bytes + at, n, tmp));
      crc = Crc32(p.bytes + at, n, crc);
      if (after_chunk) MOE_RETURN_IF_ERROR(after_chunk());
    }
  }
  MOE_RETURN_IF_ERROR(WriteAll(fd, reinterpret_cast<const char*>(&crc), 4, tmp));
  if (::fsync(fd) != 0) return ErrnoError("fsync " + tmp, errno);
  return OkStatus();
}

}  // namespace

Status WriteShardFileFromHost(const std::string& path, int rank, int64_t step,
                              const std::vector<HostPiece>& pieces,
                              const std::function<Status()>& after_chunk) {
  const std::string tmp = path + ".partial";
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  if (fd < 0) return ErrnoError("open " + tmp, errno);
  Status st = StreamShard(fd, tmp, ShardPrefix(rank, step, pieces), pieces, after_chunk);
  ::close(fd);
  if (st.ok() && ::rename(tmp.c_str(), path.c_str()) != 0)
    st = ErrnoError("rename " + tmp + " -> " + path, errno);
  if (!st.ok()) {
    ::unlink(tmp.c_str());
    return st;
  }
  return FsyncPath(DirName(path));
}

StatusOr<Node> ReadCheckpointManifest(const std::string& dir) {
  const std::string path = JoinPath(dir, "MANIFEST.json");
  MOE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(path));
  auto doc = ParseYaml(text);
  if (!doc.ok()) return DataLossError(path + ": unreadable manifest: " + doc.status().message());
  const Node* fmt = doc->Find("format");
  if (fmt == nullptr) return DataLossError(path + ": not a checkpoint manifest");
  if (fmt->scalar() != kCheckpointFormat) {
    return FailedPreconditionError(path + ": format " + fmt->scalar() + " (this engine reads " +
                                   kCheckpointFormat + ")");
  }
  return *doc;
}

StatusOr<CheckpointReader> CheckpointReader::Open(const std::string& dir, bool verify) {
  CheckpointReader r;
  r.dir_ = dir;
  MOE_ASSIGN_OR_RETURN(r.manifest_, ReadCheckpointManifest(dir));
  MOE_ASSIGN_OR_RETURN(std::vector<std::string> names, ListDir(dir));
  for (const auto& n : names) {
    if (n.rfind("shard_", 0) == 0 && n.size() > 4 && n.substr(n.size() - 4) == ".bin") {
      MOE_RETURN_IF_ERROR(r.IndexShard(JoinPath(dir, n), verify));
    }
  }
  if (r.index_.empty()) return DataLossError(dir + ": no shard holds any tensor");
  return r;
}

namespace {

// The shard's header (JSON) and where its data ends (before the CRC). With `verify`, the whole file
// is read and its CRC checked first.
StatusOr<std::pair<std::string, int64_t>> ReadShardHeader(const std::string& file, bool verify) {
  if (verify) {
    MOE_ASSIGN_OR_RETURN(std::string all, ReadFileToString(file));
    if (all.size() < 16)
      return DataLossError(file + ": truncated to " + std::to_string(all.size()) + " bytes");
    uint32_t stored;
    std::memcpy(&stored, all.data() + all.size() - 4, 4);
    if (Crc32(all.data(), all.size() - 4) != stored)
      return DataLossError(file + ": CRC mismatch (damaged or truncated shard)");
  }
  const int fd = ::open(file.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + file, errno);
  const off_t size = ::lseek(fd, 0, SEEK_END);
  char fixed[12];
  Status st = size >= 16 ? PreadAll(fd, fixed, 12, 0, file) : DataLossError(file + ": truncated");
  uint32_t hlen = 0;
  if (st.ok() && std::memcmp(fixed, kMagic, 8) != 0)
    st = DataLossError(file + ": not a checkpoint shard");
  if (st.ok()) std::memcpy(&hlen, fixed + 8, 4);
  if (st.ok() && 12 + static_cast<int64_t>(hlen) + 4 > static_cast<int64_t>(size))
    st = DataLossError(file + ": header length out of range");
  std::string header(hlen, '\0');
  if (st.ok()) st = PreadAll(fd, header.data(), hlen, 12, file);
  ::close(fd);
  MOE_RETURN_IF_ERROR(st);
  return std::make_pair(std::move(header), static_cast<int64_t>(size) - 4);
}

StatusOr<int64_t> IntField(const Node& p, const char* key, const std::string& file) {
  const Node* v = p.Find(key);
  if (v == nullptr) return DataLossError(file + ": a piece without " + key);
  return v->AsInt(key);
}

}  // namespace

Status CheckpointReader::IndexShard(const std::string& file, bool verify) {
  MOE_ASSIGN_OR_RETURN(auto head, ReadShardHeader(file, verify));
  const int64_t hlen = static_cast<int64_t>(head.first.size()), data_end = head.second;
  auto header = ParseYaml(head.first);
  if (!header.ok())
    return DataLossError(file + ": unreadable header: " + header.status().message());
  const Node* pieces = header->Find("pieces");
  if (pieces == nullptr || !pieces->IsList())
    return DataLossError(file + ": header lists no pieces");
  const int64_t payload = 12 + hlen;
  for (const Node& p : pieces->elements()) {
    Stored s;
    s.file = file;
    const Node* name = p.Find("name");
    const Node* shape = p.Find("shape");
    if (name == nullptr || shape == nullptr || p.Find("dtype") == nullptr)
      return DataLossError(file + ": a piece without name, dtype or shape");
    s.dtype = p.Find("dtype")->scalar();
    MOE_ASSIGN_OR_RETURN(DType dt, ParseDType(s.dtype));
    MOE_ASSIGN_OR_RETURN(s.begin, IntField(p, "begin", file));
    MOE_ASSIGN_OR_RETURN(s.count, IntField(p, "count", file));
    MOE_ASSIGN_OR_RETURN(int64_t off, IntField(p, "offset", file));
    s.offset = payload + off;
    std::vector<int64_t> global;
    for (const Node& d : shape->elements()) {
      MOE_ASSIGN_OR_RETURN(int64_t v, d.AsInt("shape"));
      global.push_back(v);
    }
    if (s.begin < 0 || s.count < 0 || s.begin + s.count > Numel(global) ||
        s.offset + s.count * static_cast<int64_t>(DTypeSize(dt)) > data_end) {
      return DataLossError(file + ": piece of " + name->scalar() + " out of range");
    }
    Global& g = index_[name->scalar()];
    if (!g.shape.empty() && g.shape != global)
      return DataLossError(file + ": " + name->scalar() + " has two global shapes");
    g.shape = global;
    g.pieces.push_back(std::move(s));
  }
  return OkStatus();
}

std::vector<std::string> CheckpointReader::Names() const {
  std::vector<std::string> out;
  for (const auto& [name, g] : index_) out.push_back(name);
  return out;
}

std::vector<int64_t> CheckpointReader::GlobalShape(const std::string& name) const {
  auto it = index_.find(name);
  return it == index_.end() ? std::vector<int64_t>{} : it->second.shape;
}

Status CheckpointReader::CheckComplete() const {
  for (const auto& [name, g] : index_) {
    std::vector<std::pair<int64_t, int64_t>> ranges;
    for (const auto& s : g.pieces) ranges.emplace_back(s.begin, s.begin + s.count);
    std::sort(ranges.begin(), ranges.end());
    int64_t covered = 0;
    for (const auto& [b, e] : ranges) {
      if (b > covered) break;
      covered = std::max(covered, e);
    }
    if (covered < Numel(g.shape)) {
      return DataLossError(dir_ + ": tensor " + name + " has elements from " +
                           std::to_string(covered) + " in no shard (a shard is missing)");
    }
  }
  return OkStatus();
}

Status CheckpointReader::Read(const std::string& name, int64_t begin, const Tensor& dst) const {
  auto it = index_.find(name);
  if (it == index_.end()) return DataLossError(dir_ + ": no tensor " + name);
  const int64_t end = begin + dst.numel();
  Tensor host = Tensor::Empty({dst.numel()}, dst.dtype());
  int64_t filled = 0;
  for (const Stored& s : it->second.pieces) {
    const int64_t b = std::max(begin, s.begin), e = std::min(end, s.begin + s.count);
    if (b >= e) continue;
    MOE_ASSIGN_OR_RETURN(DType dt, ParseDType(s.dtype));
    const size_t esize = DTypeSize(dt);
    Tensor part = Tensor::Empty({e - b}, dt);
    const int fd = ::open(s.file.c_str(), O_RDONLY | O_CLOEXEC);
    if (fd < 0) return ErrnoError("open " + s.file, errno);
    const Status st =
        PreadAll(fd, static_cast<char*>(part.raw()), static_cast<size_t>(e - b) * esize,
                 s.offset + (b - s.begin) * static_cast<int64_t>(esize), s.file);
    ::close(fd);
    MOE_RETURN_IF_ERROR(st);
    kernels::Convert(part, host.Rows(b - begin, e - begin));
    filled += e - b;
  }
  if (filled < dst.numel()) {
    return DataLossError(dir_ + ": tensor " + name + " elements [" + std::to_string(begin) + ", " +
                         std::to_string(end) + ") are not all in the shards");
  }
  dst.CopyFrom(host.Reshape(dst.shape()));
  return OkStatus();
}

}  // namespace moe::checkpoint
