// The safetensors format (Hugging Face's weight files): an 8-byte little-endian header length N, N
// bytes of JSON ({name: {dtype, shape, data_offsets: [begin, end]}, optional "__metadata__": {str:
// str}}), then the raw little-endian data; offsets are relative to the end of the header. Large
// models split across files named in model.safetensors.index.json ({"weight_map": {name: file}}).
//
// Our own small reader and writer (the engine links no Python or Rust library): dtypes F64, F32,
// BF16 (read into f32/f64/bf16 tensors, converting), I64 and I32.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "common/status.h"
#include "kernels/tensor.h"

namespace moe::checkpoint {

struct SafetensorsEntry {
  std::string dtype;  // "F32", "BF16", ...
  std::vector<int64_t> shape;
  int64_t begin = 0, end = 0;  // byte offsets in the data section
};

// One .safetensors file, its header parsed and checked (offsets within the file, byte counts
// matching shape and dtype, no overlaps). Data is read on demand.
class SafetensorsFile {
 public:
  static StatusOr<SafetensorsFile> Open(const std::string& path);
  const std::string& path() const { return path_; }
  const std::map<std::string, SafetensorsEntry>& entries() const { return entries_; }
  const std::map<std::string, std::string>& metadata() const { return metadata_; }
  // Reads tensor `name` into `dst` (host, f32/f64/bf16/i32/i64), converting floats; the shapes must
  // agree (INVALID_ARGUMENT naming the tensor and both shapes otherwise).
  Status Read(const std::string& name, const Tensor& dst) const;

 private:
  std::string path_;
  int64_t data_start_ = 0;
  std::map<std::string, SafetensorsEntry> entries_;
  std::map<std::string, std::string> metadata_;
};

// A Hugging Face model directory's weights: model.safetensors, or the files of
// model.safetensors.index.json.
class SafetensorsDir {
 public:
  static StatusOr<SafetensorsDir> Open(const std::string& dir);
  bool Has(const std::string& name) const { return where_.count(name) > 0; }
  const SafetensorsEntry* Find(const std::string& name) const;
  Status Read(const std::string& name, const Tensor& dst) const;
  std::vector<std::string> Names() const;

 private:
  std::vector<SafetensorsFile> files_;
  std::map<std::string, size_t> where_;  // tensor -> file index
};

// Writes one file: declare every tensor (Plan), then Write them in that order; the data of each
// comes from the caller when its turn comes, so a file larger than memory streams.
class SafetensorsWriter {
 public:
  explicit SafetensorsWriter(std::string path) : path_(std::move(path)) {}
  void Plan(const std::string& name, const std::string& dtype, const std::vector<int64_t>& shape);
  // Writes the header, then each planned tensor's bytes from `fill` (which writes exactly the
  // tensor's bytes into the buffer it is given), then renames the file into place.
  Status Write(const std::map<std::string, std::string>& metadata,
               const std::function<Status(const std::string& name, std::string* bytes)>& fill);
  int64_t planned_bytes() const { return bytes_; }

 private:
  std::string path_;
  std::vector<std::pair<std::string, SafetensorsEntry>> planned_;
  int64_t bytes_ = 0;
};

// Bytes per element of a safetensors dtype name (0 when unknown).
int64_t SafetensorsDTypeSize(const std::string& dtype);
// The safetensors name of a tensor dtype ("F32", "BF16", "F64", "I32", "I64").
std::string SafetensorsDType(DType d);

}  // namespace moe::checkpoint
