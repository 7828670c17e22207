#include "worker/engine/checkpoint/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <fstream>

#include "common/file_util.h"
#include "common/yaml.h"
#include "kernels/elementwise.h"

namespace moe::checkpoint {
namespace {

constexpr int64_t kMaxHeader = int64_t{100} << 20;  // 100 MiB of JSON is not a header

int64_t Numel(const std::vector<int64_t>& shape) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  return n;
}

std::string ShapeString(const std::vector<int64_t>& shape) {
  std::string s = "[";
  for (size_t i = 0; i < shape.size(); ++i) s += (i ? ", " : "") + std::to_string(shape[i]);
  return s + "]";
}

StatusOr<SafetensorsEntry> ParseEntry(const std::string& name, const Node& v,
                                      const std::string& path) {
  SafetensorsEntry e;
  const Node* dtype = v.Find("dtype");
  const Node* shape = v.Find("shape");
  const Node* offsets = v.Find("data_offsets");
  if (dtype == nullptr || shape == nullptr || offsets == nullptr || !shape->IsList() ||
      !offsets->IsList() || offsets->elements().size() != 2) {
    return DataLossError(path + ": tensor " + name +
                         " needs dtype, shape and data_offsets [begin, end]");
  }
  e.dtype = dtype->scalar();
  if (SafetensorsDTypeSize(e.dtype) == 0)
    return DataLossError(path + ": tensor " + name + " has unsupported dtype " + e.dtype);
  for (const Node& d : shape->elements()) {
    MOE_ASSIGN_OR_RETURN(int64_t n, d.AsInt(name + ".shape"));
    if (n < 0) return DataLossError(path + ": tensor " + name + " has a negative dimension");
    e.shape.push_back(n);
  }
  MOE_ASSIGN_OR_RETURN(e.begin, offsets->elements()[0].AsInt(name + ".data_offsets"));
  MOE_ASSIGN_OR_RETURN(e.end, offsets->elements()[1].AsInt(name + ".data_offsets"));
  if (e.begin < 0 || e.end < e.begin ||
      e.end - e.begin != Numel(e.shape) * SafetensorsDTypeSize(e.dtype)) {
    return DataLossError(path + ": tensor " + name + " has " + std::to_string(e.end - e.begin) +
                         " bytes for " + e.dtype + " " + ShapeString(e.shape));
  }
  return e;
}

Status ReadAt(const std::string& path, int64_t offset, char* dst, size_t bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + path, errno);
  size_t done = 0;
  Status st;
  while (done < bytes) {
    const ssize_t n = ::pread(fd, dst + done, bytes - done,
                              static_cast<off_t>(offset + static_cast<int64_t>(done)));
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      st = DataLossError(path + ": short read");
      break;
    }
    done += static_cast<size_t>(n);
  }
  ::close(fd);
  return st;
}

// Host tensor of a safetensors dtype (floats as f32/f64/bf16; ints as i32/i64).
StatusOr<DType> TensorDType(const std::string& st) {
  if (st == "F32") return DType::kF32;
  if (st == "F64") return DType::kF64;
  if (st == "BF16") return DType::kBF16;
  if (st == "I32") return DType::kI32;
  if (st == "I64") return DType::kI64;
  return InvalidArgumentError("dtype " + st + " is not read into tensors");
}

}  // namespace

int64_t SafetensorsDTypeSize(const std::string& d) {
  if (d == "F64" || d == "I64") return 8;
  if (d == "F32" || d == "I32") return 4;
  if (d == "BF16" || d == "F16" || d == "I16") return 2;
  if (d == "F8_E4M3" || d == "F8_E5M2" || d == "U8" || d == "I8" || d == "BOOL") return 1;
  return 0;
}

std::string SafetensorsDType(DType d) {
  switch (d) {
    case DType::kF32:
      return "F32";
    case DType::kF64:
      return "F64";
    case DType::kBF16:
      return "BF16";
    case DType::kI32:
      return "I32";
    case DType::kI64:
      return "I64";
  }
  return "?";
}

StatusOr<SafetensorsFile> SafetensorsFile::Open(const std::string& path) {
  SafetensorsFile f;
  f.path_ = path;
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return ErrnoError("open " + path, errno);
  const int64_t size = static_cast<int64_t>(::lseek(fd, 0, SEEK_END));
  ::close(fd);
  uint64_t n = 0;
  if (size < 8)
    return DataLossError(path + ": not a safetensors file (" + std::to_string(size) + " bytes)");
  MOE_RETURN_IF_ERROR(ReadAt(path, 0, reinterpret_cast<char*>(&n), 8));
  // Compared unsigned: a length with its top bit set must not read as a negative, fitting one (a
  // crash fuzz_safetensors found: std::length_error allocating 0xef...a3 bytes).
  if (n == 0 || n > static_cast<uint64_t>(kMaxHeader) || n > static_cast<uint64_t>(size) - 8) {
    return DataLossError(path + ": header length " + std::to_string(n) + " does not fit the file");
  }
  std::string json(n, '\0');
  MOE_RETURN_IF_ERROR(ReadAt(path, 8, json.data(), n));
  auto doc = ParseYaml(json);
  if (!doc.ok() || !doc->IsMap()) return DataLossError(path + ": the header is not a JSON object");
  f.data_start_ = 8 + static_cast<int64_t>(n);
  std::vector<std::pair<int64_t, int64_t>> spans;
  for (const auto& [name, v] : doc->items()) {
    if (name == "__metadata__") {
      for (const auto& [k, val] : v.items()) f.metadata_[k] = val.scalar();
      continue;
    }
    MOE_ASSIGN_OR_RETURN(SafetensorsEntry e, ParseEntry(name, v, path));
    if (f.data_start_ + e.end > size)
      return DataLossError(path + ": tensor " + name + " runs past the end of the file");
    spans.emplace_back(e.begin, e.end);
    f.entries_[name] = std::move(e);
  }
  std::sort(spans.begin(), spans.end());
  for (size_t i = 1; i < spans.size(); ++i) {
    if (spans[i].first < spans[i - 1].second)
      return DataLossError(path + ": two tensors share bytes");
  }
  return f;
}

Status SafetensorsFile::Read(const std::string& name, const Tensor& dst) const {
  auto it = entries_.find(name);
  if (it == entries_.end()) return NotFoundError(path_ + ": no tensor " + name);
  const SafetensorsEntry& e = it->second;
  if (e.shape != dst.shape()) {
    return InvalidArgumentError("tensor " + name + " is " + ShapeString(e.shape) + " in " + path_ +
                                ", the model's is " + ShapeString(dst.shape()));
  }
  MOE_ASSIGN_OR_RETURN(DType dt, TensorDType(e.dtype));
  Tensor raw = Tensor::Empty(dst.shape(), dt);
  MOE_RETURN_IF_ERROR(
      ReadAt(path_, data_start_ + e.begin, static_cast<char*>(raw.raw()), raw.nbytes()));
  if (dt == dst.dtype()) {
    dst.CopyFrom(raw);
  } else {
    MOE_CHECK(dst.device().is_cpu()) << "safetensors reads into host tensors";
    kernels::Convert(raw, dst);
  }
  return OkStatus();
}

StatusOr<SafetensorsDir> SafetensorsDir::Open(const std::string& dir) {
  SafetensorsDir d;
  std::vector<std::string> files;
  const std::string index = JoinPath(dir, "model.safetensors.index.json");
  if (PathExists(index)) {
    MOE_ASSIGN_OR_RETURN(std::string text, ReadFileToString(index));
    auto doc = ParseYaml(text);
    const Node* map = doc.ok() ? doc->Find("weight_map") : nullptr;
    if (map == nullptr || !map->IsMap()) return DataLossError(index + ": no weight_map");
    for (const auto& [name, file] : map->items()) {
      if (std::find(files.begin(), files.end(), file.scalar()) == files.end())
        files.push_back(file.scalar());
    }
  } else if (PathExists(JoinPath(dir, "model.safetensors"))) {
    files.push_back("model.safetensors");
  } else {
    return NotFoundError(dir + ": neither model.safetensors nor model.safetensors.index.json");
  }
  for (const auto& f : files) {
    if (f.find('/') != std::string::npos)
      return DataLossError(index + ": file name " + f + " leaves the directory");
    MOE_ASSIGN_OR_RETURN(SafetensorsFile file, SafetensorsFile::Open(JoinPath(dir, f)));
    for (const auto& [name, e] : file.entries()) {
      if (d.where_.count(name)) return DataLossError(dir + ": tensor " + name + " is in two files");
      d.where_[name] = d.files_.size();
    }
    d.files_.push_back(std::move(file));
  }
  return d;
}

const SafetensorsEntry* SafetensorsDir::Find(const std::string& name) const {
  auto it = where_.find(name);
  if (it == where_.end()) return nullptr;
  return &files_[it->second].entries().at(name);
}

Status SafetensorsDir::Read(const std::string& name, const Tensor& dst) const {
  auto it = where_.find(name);
  if (it == where_.end()) return NotFoundError("no tensor " + name + " in the weights");
  return files_[it->second].Read(name, dst);
}

std::vector<std::string> SafetensorsDir::Names() const {
  std::vector<std::string> out;
  for (const auto& [name, i] : where_) out.push_back(name);
  return out;
}

void SafetensorsWriter::Plan(const std::string& name, const std::string& dtype,
                             const std::vector<int64_t>& shape) {
  SafetensorsEntry e;
  e.dtype = dtype;
  e.shape = shape;
  e.begin = bytes_;
  e.end = bytes_ + Numel(shape) * SafetensorsDTypeSize(dtype);
  bytes_ = e.end;
  planned_.emplace_back(name, std::move(e));
}

Status SafetensorsWriter::Write(
    const std::map<std::string, std::string>& metadata,
    const std::function<Status(const std::string&, std::string*)>& fill) {
  Node header = Node::Map();
  if (!metadata.empty()) {
    Node m = Node::Map();
    for (const auto& [k, v] : metadata) m.Set(k, Node::Scalar(v, true));
    header.Set("__metadata__", std::move(m));
  }
  for (const auto& [name, e] : planned_) {
    Node t = Node::Map();
    t.Set("dtype", Node::Scalar(e.dtype, true));
    Node shape = Node::List();
    for (int64_t d : e.shape) shape.Append(Node::Scalar(std::to_string(d)));
    t.Set("shape", std::move(shape));
    Node off = Node::List();
    off.Append(Node::Scalar(std::to_string(e.begin)));
    off.Append(Node::Scalar(std::to_string(e.end)));
    t.Set("data_offsets", std::move(off));
    header.Set(name, std::move(t));
  }
  std::string json = ToJson(header);
  json.append((8 - json.size() % 8) % 8, ' ');  // the data section starts 8-byte aligned
  const std::string tmp = path_ + ".tmp";
  std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
  if (!out) return UnavailableError("cannot write " + tmp);
  const uint64_t n = json.size();
  out.write(reinterpret_cast<const char*>(&n), 8);
  out.write(json.data(), static_cast<std::streamsize>(json.size()));
  std::string bytes;
  for (const auto& [name, e] : planned_) {
    bytes.clear();
    MOE_RETURN_IF_ERROR(fill(name, &bytes));
    if (static_cast<int64_t>(bytes.size()) != e.end - e.begin) {
      return InternalError("safetensors: " + name + " came with " + std::to_string(bytes.size()) +
                           " bytes, planned " + std::to_string(e.end - e.begin));
    }
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  out.close();
  if (!out) return UnavailableError("writing " + tmp + " failed (disk full?)");
  MOE_RETURN_IF_ERROR(FsyncPath(tmp));
  if (::rename(tmp.c_str(), path_.c_str()) != 0) return ErrnoError("rename " + tmp, errno);
  return OkStatus();
}

}  // namespace moe::checkpoint
