#include "worker/engine/checkpoint/npy.h"

#include <cstdio>
#include <cstring>
#include <fstream>

#include "common/file_util.h"

namespace moe::checkpoint {
namespace {

constexpr char kMagic[] = "\x93NUMPY";
// (Brackets by code: pmccabe, our complexity linter, counts them inside character literals.)
constexpr char kOpenParen = '\x28', kCloseParen = '\x29', kOpenBrace = '\x7b', kCloseBrace = '\x7d';

// The header dictionary's value for `key` ("'descr': '<i8'" -> "'<i8'"), up to the next ',' at
// depth 0.
std::string DictValue(const std::string& header, const std::string& key) {
  const size_t at = header.find("'" + key + "'");
  if (at == std::string::npos) return "";
  size_t i = header.find(':', at);
  if (i == std::string::npos) return "";
  ++i;
  int depth = 0;
  std::string out;
  for (; i < header.size(); ++i) {
    const char c = header[i];
    if (c == kOpenParen) ++depth;
    if (c == kCloseParen) --depth;
    if ((c == ',' || c == kCloseBrace) && depth == 0) break;
    if (c != ' ') out += c;
  }
  return out;
}

StatusOr<std::vector<int64_t>> ParseShape(const std::string& v, const std::string& path) {
  if (v.size() < 2 || v.front() != kOpenParen || v.back() != kCloseParen)
    return InvalidArgumentError(path + ": bad shape " + v);
  std::vector<int64_t> shape;
  std::string num;
  for (size_t i = 1; i < v.size(); ++i) {
    if (v[i] == ',' || v[i] == kCloseParen) {
      if (!num.empty()) shape.push_back(std::stoll(num));
      num.clear();
    } else if (v[i] >= '0' && v[i] <= '9') {
      num += v[i];
    } else {
      return InvalidArgumentError(path + ": bad shape " + v);
    }
  }
  return shape;
}

int64_t ReadInt(const char* p, char kind, int size) {
  int64_t v = 0;
  uint64_t u = 0;
  std::memcpy(&u, p, static_cast<size_t>(size));  // little-endian host
  if (kind == 'u' || size == 8) return static_cast<int64_t>(u);
  const uint64_t sign = uint64_t{1} << (size * 8 - 1);
  v = static_cast<int64_t>((u ^ sign) - sign);
  return v;
}

}  // namespace

StatusOr<NpyInts> ReadNpyInts(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) return NotFoundError(path + ": cannot open");
  std::string data((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (data.size() < 10 || data.compare(0, 6, kMagic, 6) != 0)
    return InvalidArgumentError(path + ": not a .npy file");
  const int major = static_cast<unsigned char>(data[6]);
  size_t header_len = 0, at = 0;
  if (major == 1) {
    header_len = static_cast<unsigned char>(data[8]) |
                 static_cast<size_t>(static_cast<unsigned char>(data[9])) << 8;
    at = 10;
  } else {
    if (data.size() < 12) return InvalidArgumentError(path + ": truncated header");
    for (int i = 0; i < 4; ++i)
      header_len |= static_cast<size_t>(static_cast<unsigned char>(data[8 + i])) << (8 * i);
    at = 12;
  }
  if (at + header_len > data.size()) return InvalidArgumentError(path + ": truncated header");
  const std::string header = data.substr(at, header_len);
  const std::string descr = DictValue(header, "descr");
  if (DictValue(header, "fortran_order") != "False")
    return InvalidArgumentError(path + ": only C-order arrays");
  if (descr.size() != 5 || (descr[1] != '<' && descr[1] != '|') ||
      (descr[2] != 'i' && descr[2] != 'u') || descr[3] < '1' || descr[3] > '8') {
    return InvalidArgumentError(path + ": dtype " + descr +
                                " is not a little-endian integer (tokens need int32 or int64)");
  }
  NpyInts out;
  MOE_ASSIGN_OR_RETURN(out.shape, ParseShape(DictValue(header, "shape"), path));
  int64_t n = 1;
  for (int64_t d : out.shape) n *= d;
  const int size = descr[3] - '0';
  const size_t body = at + header_len;
  if (data.size() - body < static_cast<size_t>(n) * static_cast<size_t>(size)) {
    return DataLossError(path + ": holds fewer values than its shape");
  }
  out.values.resize(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i)
    out.values[static_cast<size_t>(i)] =
        ReadInt(&data[body + static_cast<size_t>(i * size)], descr[2], size);
  return out;
}

namespace {

// The .npy header (version 1.0: magic, 2 version bytes, 2 length bytes, then the dict padded with
// spaces to a multiple of 64 bytes, ending in a newline) of a C-order array of `descr`.
std::string NpyHeader(const char* descr, const std::vector<int64_t>& shape) {
  std::string dict = std::string(1, kOpenBrace) + "'descr': '" + descr +
                     "', 'fortran_order': False, 'shape': " + kOpenParen;
  for (int64_t d : shape) dict += std::to_string(d) + ",";
  if (shape.size() > 1) dict.pop_back();
  dict += std::string(1, kCloseParen) + ", " + kCloseBrace;
  size_t total = 10 + dict.size() + 1;
  const size_t padded = (total + 63) / 64 * 64;
  dict += std::string(padded - total, ' ') + "\n";
  const uint16_t len = static_cast<uint16_t>(dict.size());
  std::string prefix(kMagic, 6);
  prefix += std::string(1, '\x01') + std::string(1, '\0') + static_cast<char>(len & 0xff) +
            static_cast<char>(len >> 8);
  return prefix + dict;
}

}  // namespace

Status WriteNpyInts(const std::string& path, const NpyInts& a) {
  int64_t n = 1;
  for (int64_t d : a.shape) n *= d;
  if (n != static_cast<int64_t>(a.values.size()))
    return InternalError(path + ": " + std::to_string(a.values.size()) + " values for a shape of " +
                         std::to_string(n));
  std::string bytes = NpyHeader("<i8", a.shape);
  bytes.append(reinterpret_cast<const char*>(a.values.data()), a.values.size() * sizeof(int64_t));
  return WriteFileAtomic(path, bytes);
}

StatusOr<std::unique_ptr<NpyFloatWriter>> NpyFloatWriter::Create(
    const std::string& path, const std::vector<int64_t>& shape) {
  std::unique_ptr<NpyFloatWriter> owner(new NpyFloatWriter());
  NpyFloatWriter& w = *owner;
  w.path_ = path;
  w.f_ = std::fopen(path.c_str(), "wb");
  if (w.f_ == nullptr) return UnavailableError(path + ": cannot create");
  w.expected_ = 1;
  for (int64_t d : shape) w.expected_ *= d;
  const std::string header = NpyHeader("<f4", shape);
  if (std::fwrite(header.data(), 1, header.size(), w.f_) != header.size())
    return UnavailableError(path + ": write failed");
  return owner;
}

NpyFloatWriter::~NpyFloatWriter() {
  if (f_ != nullptr) std::fclose(f_);
}

Status NpyFloatWriter::Append(const float* values, int64_t n) {
  if (written_ + n > expected_) return InternalError(path_ + ": more values than the shape holds");
  if (std::fwrite(values, sizeof(float), static_cast<size_t>(n), f_) != static_cast<size_t>(n)) {
    return UnavailableError(path_ + ": write failed");
  }
  written_ += n;
  return OkStatus();
}

Status NpyFloatWriter::Close() {
  if (written_ != expected_)
    return InternalError(path_ + ": " + std::to_string(written_) + " of " +
                         std::to_string(expected_) + " values written");
  const bool ok = std::fflush(f_) == 0 && std::fclose(f_) == 0;
  f_ = nullptr;
  return ok ? OkStatus() : UnavailableError(path_ + ": close failed");
}

}  // namespace moe::checkpoint
