// NumPy's .npy format (version 1.0/2.0/3.0 headers), the little we need: integer token arrays in,
// float32 logits out. https://numpy.org/doc/stable/reference/generated/numpy.lib.format.html
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace moe::checkpoint {

struct NpyInts {
  std::vector<int64_t> shape;
  std::vector<int64_t> values;  // row-major
};

// Reads a C-order array of little-endian signed or unsigned integers (i1..i8, u1..u8).
StatusOr<NpyInts> ReadNpyInts(const std::string& path);

// Writes a C-order little-endian int64 array (what ReadNpyInts reads back).
Status WriteNpyInts(const std::string& path, const NpyInts& a);

// A streaming float32 writer: the header first (shape known), then the rows in order.
class NpyFloatWriter {
 public:
  static StatusOr<std::unique_ptr<NpyFloatWriter>> Create(const std::string& path,
                                                          const std::vector<int64_t>& shape);
  NpyFloatWriter(const NpyFloatWriter&) = delete;
  NpyFloatWriter& operator=(const NpyFloatWriter&) = delete;
  ~NpyFloatWriter();
  Status Append(const float* values, int64_t n);
  // Checks that exactly the shape's count was written, then flushes and closes.
  Status Close();

 private:
  NpyFloatWriter() = default;
  std::string path_;
  std::FILE* f_ = nullptr;
  int64_t expected_ = 0, written_ = 0;
};

}  // namespace moe::checkpoint
