#include "worker/engine/data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <algorithm>
#include <cstring>

#include "common/check.h"
#include "common/file_util.h"
#include "common/yaml.h"

namespace moe {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};

size_t ItemSize(TokenDType t) {
  switch (t) {
    case TokenDType::kU8: case TokenDType::kI8: return 1;
    case TokenDType::kI16: case TokenDType::kU16: return 2;
    case TokenDType::kI32: case TokenDType::kF32: return 4;
    case TokenDType::kI64: case TokenDType::kF64: return 8;
  }
  return 0;
}

template <typename T>
T ReadLe(const std::string& s, size_t off) {
  T v;
  std::memcpy(&v, s.data() + off, sizeof(T));
  return v;
}

}  // namespace

IndexedDataset::~IndexedDataset() {
  if (bin_ != nullptr) ::munmap(const_cast<uint8_t*>(bin_), bin_size_);
}

StatusOr<std::unique_ptr<IndexedDataset>> IndexedDataset::Open(const std::string& prefix, int64_t vocab_size) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  auto idx_or = ReadFileToString(idx_path);
  if (!idx_or.ok()) {
    return NotFoundError("dataset index " + idx_path + " cannot be read (" + idx_or.status().message() +
                         "); prepare it with moe-prep (make data)");
  }
  const std::string& idx = *idx_or;
  auto bad = [&](const std::string& why) { return DataLossError("dataset index " + idx_path + ": " + why); };
  constexpr size_t kHeader = 9 + 8 + 1 + 8 + 8;
  if (idx.size() < 9 || std::memcmp(idx.data(), kMagic, 9) != 0) {
    return bad("wrong magic (not a Megatron MMIDIDX index file)");
  }
  if (idx.size() < kHeader) return bad("truncated header (" + std::to_string(idx.size()) + " bytes)");
  const uint64_t version = ReadLe<uint64_t>(idx, 9);
  if (version != 1) return bad("unsupported version " + std::to_string(version) + " (expected 1)");
  auto ds = std::unique_ptr<IndexedDataset>(new IndexedDataset());
  ds->prefix_ = prefix;
  const uint8_t code = static_cast<uint8_t>(idx[17]);
  ds->dtype_ = static_cast<TokenDType>(code);
  if (code != 1 && code != 2 && code != 3 && code != 4 && code != 5 && code != 8) {
    return bad("token dtype code " + std::to_string(code) + " is not an integer type");
  }
  ds->item_size_ = ItemSize(ds->dtype_);
  const uint64_t n = ReadLe<uint64_t>(idx, 18), d = ReadLe<uint64_t>(idx, 26);
  const uint64_t need = kHeader + n * 4 + n * 8 + d * 8;
  if (n > (1ULL << 40) || d > (1ULL << 40) || idx.size() < need) {
    return bad("truncated: " + std::to_string(n) + " sequences and " + std::to_string(d) + " document indices need " +
               std::to_string(need) + " bytes, the file has " + std::to_string(idx.size()));
  }
  if (idx.size() > need) return bad("trailing bytes after the document indices (multimodal indices are not supported)");
  ds->lengths_.resize(n);
  ds->pointers_.resize(n);
  ds->doc_idx_.resize(d);
  std::memcpy(ds->lengths_.data(), idx.data() + kHeader, n * 4);
  std::memcpy(ds->pointers_.data(), idx.data() + kHeader + n * 4, n * 8);
  std::memcpy(ds->doc_idx_.data(), idx.data() + kHeader + n * 12, d * 8);
  if (d < 1 || ds->doc_idx_.front() != 0 || ds->doc_idx_.back() != static_cast<int64_t>(n)) {
    return bad("document indices must run from 0 to the sequence count");
  }
  // The .bin.
  int fd = ::open(bin_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return NotFoundError("dataset data " + bin_path + " cannot be opened: " + std::strerror(errno));
  struct stat st;
  ::fstat(fd, &st);
  ds->bin_size_ = static_cast<size_t>(st.st_size);
  if (ds->bin_size_ > 0) {
    void* p = ::mmap(nullptr, ds->bin_size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      int err = errno;
      ::close(fd);
      return ErrnoError("mmap " + bin_path, err);
    }
    ds->bin_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  // Sequences must be back to back (Megatron's builder writes them so); then the token stream is the
  // .bin itself.
  int64_t expect = 0;
  for (uint64_t i = 0; i < n; ++i) {
    if (ds->lengths_[i] < 0) return bad("sequence " + std::to_string(i) + " has a negative length");
    if (ds->pointers_[i] != expect) {
      return bad("sequence " + std::to_string(i) + " starts at byte " + std::to_string(ds->pointers_[i]) + ", expected " +
                 std::to_string(expect) + " (sequences must be contiguous)");
    }
    expect += static_cast<int64_t>(ds->lengths_[i]) * static_cast<int64_t>(ds->item_size_);
  }
  if (static_cast<int64_t>(ds->bin_size_) != expect) {
    return DataLossError("dataset data " + bin_path + " has " + std::to_string(ds->bin_size_) + " bytes, the index describes " +
                         std::to_string(expect) + " (truncated or mismatched .bin/.idx)");
  }
  ds->total_tokens_ = expect / static_cast<int64_t>(ds->item_size_);
  if (ds->total_tokens_ < 2) return bad("the dataset holds fewer than 2 tokens");
  if (vocab_size > 0) {
    auto meta = ReadFileToString(prefix + ".json");
    if (meta.ok()) {
      auto doc = ParseYaml(*meta);
      if (doc.ok() && doc->Find("vocab_size") != nullptr) {
        auto v = doc->Find("vocab_size")->AsInt("vocab_size");
        if (v.ok() && *v != vocab_size) {
          return FailedPreconditionError("dataset " + prefix + " was tokenized with vocab_size " + std::to_string(*v) +
                                         " (see " + prefix + ".json), the model has vocab_size " +
                                         std::to_string(vocab_size) + ": a vocab mismatch");
        }
      }
    }
    // Every id must index the embedding table.
    int64_t max_id = -1, min_id = 0;
    for (int64_t i = 0; i < ds->total_tokens_; ++i) {
      const int32_t t = ds->Token(i);
      max_id = std::max<int64_t>(max_id, t);
      min_id = std::min<int64_t>(min_id, t);
    }
    if (max_id >= vocab_size || min_id < 0) {
      return FailedPreconditionError("dataset " + prefix + " holds token id " + std::to_string(max_id >= vocab_size ? max_id : min_id) +
                                     ", outside the model's vocab_size " + std::to_string(vocab_size) + ": a vocab mismatch");
    }
  }
  return ds;
}

int32_t IndexedDataset::Token(int64_t i) const {
  const uint8_t* p = bin_ + static_cast<size_t>(i) * item_size_;
  switch (dtype_) {
    case TokenDType::kU8: return *p;
    case TokenDType::kI8: return static_cast<int8_t>(*p);
    case TokenDType::kI16: { int16_t v; std::memcpy(&v, p, 2); return v; }
    case TokenDType::kU16: { uint16_t v; std::memcpy(&v, p, 2); return v; }
    case TokenDType::kI32: { int32_t v; std::memcpy(&v, p, 4); return v; }
    case TokenDType::kI64: { int64_t v; std::memcpy(&v, p, 8); return static_cast<int32_t>(v); }
    default: return 0;
  }
}

void IndexedDataset::Read(int64_t begin, int64_t n, int32_t* out) const {
  MOE_CHECK(begin >= 0 && begin + n <= total_tokens_) << "read [" << begin << ", " << begin + n << ") of " << total_tokens_;
  if (dtype_ == TokenDType::kU16) {
    const uint8_t* p = bin_ + static_cast<size_t>(begin) * 2;
    for (int64_t i = 0; i < n; ++i) {
      uint16_t v;
      std::memcpy(&v, p + 2 * i, 2);
      out[i] = v;
    }
    return;
  }
  for (int64_t i = 0; i < n; ++i) out[i] = Token(begin + i);
}

IndexedDatasetWriter::IndexedDatasetWriter(std::string prefix, int64_t vocab_size)
    : prefix_(std::move(prefix)), vocab_size_(vocab_size),
      dtype_(vocab_size < 65500 ? TokenDType::kU16 : TokenDType::kI32) {}

Status IndexedDatasetWriter::AddDocument(const std::vector<int32_t>& tokens) {
  const size_t item = ItemSize(dtype_);
  pointers_.push_back(static_cast<int64_t>(bin_.size()));
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab_size_) return InvalidArgumentError("token id " + std::to_string(t) + " outside vocab_size " + std::to_string(vocab_size_));
    if (item == 2) {
      uint16_t v = static_cast<uint16_t>(t);
      bin_.append(reinterpret_cast<const char*>(&v), 2);
    } else {
      bin_.append(reinterpret_cast<const char*>(&t), 4);
    }
  }
  tokens_ += static_cast<int64_t>(tokens.size());
  doc_idx_.push_back(static_cast<int64_t>(lengths_.size()));
  return OkStatus();
}

Status IndexedDatasetWriter::Finish(const std::string& sidecar_json) {
  std::string idx(kMagic, 9);
  auto put = [&](const void* p, size_t n) { idx.append(static_cast<const char*>(p), n); };
  const uint64_t version = 1, n = lengths_.size(), d = doc_idx_.size();
  const uint8_t code = static_cast<uint8_t>(dtype_);
  put(&version, 8);
  put(&code, 1);
  put(&n, 8);
  put(&d, 8);
  put(lengths_.data(), n * 4);
  put(pointers_.data(), n * 8);
  put(doc_idx_.data(), d * 8);
  MOE_RETURN_IF_ERROR(WriteFileAtomic(prefix_ + ".bin", bin_));
  MOE_RETURN_IF_ERROR(WriteFileAtomic(prefix_ + ".idx", idx));
  return WriteFileAtomic(prefix_ + ".json", sidecar_json);
}

}  // namespace moe
