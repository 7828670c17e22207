#include "worker/engine/data/indexed_dataset.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/check.h"
#include "common/file_util.h"
#include "common/yaml.h"

namespace moe::data {
namespace {

constexpr char kMagic[9] = {'M', 'M', 'I', 'D', 'I', 'D', 'X', '\0', '\0'};

size_t ItemSize(TokenDType t) {
  switch (t) {
    case TokenDType::kU8:
    case TokenDType::kI8:
      return 1;
    case TokenDType::kI16:
    case TokenDType::kU16:
      return 2;
    case TokenDType::kI32:
    case TokenDType::kF32:
      return 4;
    case TokenDType::kI64:
    case TokenDType::kF64:
      return 8;
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

StatusOr<std::unique_ptr<IndexedDataset>> IndexedDataset::Open(const std::string& prefix,
                                                               int64_t vocab_size) {
  const std::string idx_path = prefix + ".idx", bin_path = prefix + ".bin";
  auto idx = ReadFileToString(idx_path);
  if (!idx.ok()) {
    // FAILED_PRECONDITION, not NOT_FOUND: a job whose data is missing cannot run as specified, and
    // a restart would fail the same way (common/rank_end.h classes it permanent: the job fails at
    // once).
    return FailedPreconditionError("dataset index " + idx_path + " cannot be read (" +
                                   idx.status().message() +
                                   "); prepare it with moe-prep (make data)");
  }
  auto ds = std::unique_ptr<IndexedDataset>(new IndexedDataset());
  ds->prefix_ = prefix;
  MOE_RETURN_IF_ERROR(ds->ParseIndex(*idx, idx_path));
  MOE_RETURN_IF_ERROR(ds->MapData(bin_path));
  MOE_RETURN_IF_ERROR(ds->CheckLayout(idx_path, bin_path));
  if (vocab_size > 0) MOE_RETURN_IF_ERROR(ds->CheckVocab(vocab_size));
  return ds;
}

// The .idx: header (magic, version, token dtype, counts), then sequence lengths, pointers and
// document indices.
Status IndexedDataset::ParseIndex(const std::string& idx, const std::string& idx_path) {
  auto bad = [&](const std::string& why) {
    return DataLossError("dataset index " + idx_path + ": " + why);
  };
  constexpr size_t kHeader = 9 + 8 + 1 + 8 + 8;
  if (idx.size() < 9 || std::memcmp(idx.data(), kMagic, 9) != 0) {
    return bad("wrong magic (not a Megatron MMIDIDX index file)");
  }
  if (idx.size() < kHeader)
    return bad("truncated header (" + std::to_string(idx.size()) + " bytes)");
  const uint64_t version = ReadLe<uint64_t>(idx, 9);
  if (version != 1) return bad("unsupported version " + std::to_string(version) + " (expected 1)");
  const uint8_t code = static_cast<uint8_t>(idx[17]);
  if (code != 1 && code != 2 && code != 3 && code != 4 && code != 5 && code != 8) {
    return bad("token dtype code " + std::to_string(code) + " is not an integer type");
  }
  dtype_ = static_cast<TokenDType>(code);
  item_size_ = ItemSize(dtype_);
  const uint64_t n = ReadLe<uint64_t>(idx, 18), d = ReadLe<uint64_t>(idx, 26);
  const uint64_t need = kHeader + n * 4 + n * 8 + d * 8;
  if (n > (1ULL << 40) || d > (1ULL << 40) || idx.size() < need) {
    return bad("truncated: " + std::to_string(n) + " sequences and " + std::to_string(d) +
               " document indices need " + std::to_string(need) + " bytes, the file has " +
               std::to_string(idx.size()));
  }
  if (idx.size() > need)
    return bad("trailing bytes after the document indices (multimodal indices are not supported)");
  // An empty index is refused before any copy (memcpy into an empty vector's null data() is
  // undefined even for zero bytes; fuzz_indexed_dataset found it).
  if (n < 1 || d < 1)
    return bad("document indices must run from 0 to the sequence count (the index is empty)");
  lengths_.resize(n);
  pointers_.resize(n);
  doc_idx_.resize(d);
  std::memcpy(lengths_.data(), idx.data() + kHeader, n * 4);
  std::memcpy(pointers_.data(), idx.data() + kHeader + n * 4, n * 8);
  std::memcpy(doc_idx_.data(), idx.data() + kHeader + n * 12, d * 8);
  if (doc_idx_.front() != 0 || doc_idx_.back() != static_cast<int64_t>(n)) {
    return bad("document indices must run from 0 to the sequence count");
  }
  // Every entry in between too, never decreasing (fuzz_indexed_dataset found a negative one
  // indexing the pointers out of bounds).
  for (size_t i = 1; i < doc_idx_.size(); ++i) {
    if (doc_idx_[i] < doc_idx_[i - 1])
      return bad("document index " + std::to_string(i) + " decreases");
  }
  return OkStatus();
}

Status IndexedDataset::MapData(const std::string& bin_path) {
  int fd = ::open(bin_path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0)
    return FailedPreconditionError("dataset data " + bin_path +
                                   " cannot be opened: " + std::strerror(errno));
  struct stat st;
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return ErrnoError("stat " + bin_path, err);
  }
  bin_size_ = static_cast<size_t>(st.st_size);
  if (bin_size_ > 0) {
    void* p = ::mmap(nullptr, bin_size_, PROT_READ, MAP_SHARED, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      bin_size_ = 0;
      return ErrnoError("mmap " + bin_path, err);
    }
    bin_ = static_cast<const uint8_t*>(p);
  }
  ::close(fd);
  return OkStatus();
}

// Sequences must be back to back (Megatron's builder writes them so); then the token stream is the
// .bin itself.
Status IndexedDataset::CheckLayout(const std::string& idx_path, const std::string& bin_path) {
  auto bad = [&](const std::string& why) {
    return DataLossError("dataset index " + idx_path + ": " + why);
  };
  int64_t expect = 0;
  for (size_t i = 0; i < lengths_.size(); ++i) {
    if (lengths_[i] < 0) return bad("sequence " + std::to_string(i) + " has a negative length");
    if (pointers_[i] != expect) {
      return bad("sequence " + std::to_string(i) + " starts at byte " +
                 std::to_string(pointers_[i]) + ", expected " + std::to_string(expect) +
                 " (sequences must be contiguous)");
    }
    expect += static_cast<int64_t>(lengths_[i]) * static_cast<int64_t>(item_size_);
  }
  if (static_cast<int64_t>(bin_size_) != expect) {
    return DataLossError("dataset data " + bin_path + " has " + std::to_string(bin_size_) +
                         " bytes, the index describes " + std::to_string(expect) +
                         " (truncated or mismatched .bin/.idx)");
  }
  total_tokens_ = expect / static_cast<int64_t>(item_size_);
  if (total_tokens_ < 2) return bad("the dataset holds fewer than 2 tokens");
  return OkStatus();
}

// The tokenizer's vocabulary (the sidecar <prefix>.json) and every id must fit the model's.
Status IndexedDataset::CheckVocab(int64_t vocab_size) const {
  if (auto meta = ReadFileToString(prefix_ + ".json"); meta.ok()) {
    auto doc = ParseYaml(*meta);
    const Node* v = doc.ok() ? doc->Find("vocab_size") : nullptr;
    auto n =
        v != nullptr ? v->AsInt("vocab_size") : StatusOr<int64_t>(NotFoundError("no vocab_size"));
    if (n.ok() && *n != vocab_size) {
      return FailedPreconditionError("dataset " + prefix_ + " was tokenized with vocab_size " +
                                     std::to_string(*n) + " (see " + prefix_ +
                                     ".json), the model has vocab_size " +
                                     std::to_string(vocab_size) + ": a vocab mismatch");
    }
  }
  int64_t max_id = -1, min_id = 0;
  for (int64_t i = 0; i < total_tokens_; ++i) {
    const int32_t t = Token(i);
    max_id = std::max<int64_t>(max_id, t);
    min_id = std::min<int64_t>(min_id, t);
  }
  if (max_id >= vocab_size || min_id < 0) {
    return FailedPreconditionError("dataset " + prefix_ + " holds token id " +
                                   std::to_string(max_id >= vocab_size ? max_id : min_id) +
                                   ", outside the model's vocab_size " +
                                   std::to_string(vocab_size) + ": a vocab mismatch");
  }
  return OkStatus();
}

int64_t IndexedDataset::DocumentTokenBegin(int64_t d) const {
  MOE_CHECK(d >= 0 && d <= num_documents()) << "document " << d << " of " << num_documents();
  const int64_t seq = doc_idx_[static_cast<size_t>(d)];
  if (seq >= num_sequences()) return total_tokens_;
  return pointers_[static_cast<size_t>(seq)] / static_cast<int64_t>(item_size_);
}

int32_t IndexedDataset::Token(int64_t i) const {
  const uint8_t* p = bin_ + static_cast<size_t>(i) * item_size_;
  switch (dtype_) {
    case TokenDType::kU8:
      return *p;
    case TokenDType::kI8:
      return static_cast<int8_t>(*p);
    case TokenDType::kI16: {
      int16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case TokenDType::kU16: {
      uint16_t v;
      std::memcpy(&v, p, 2);
      return v;
    }
    case TokenDType::kI32: {
      int32_t v;
      std::memcpy(&v, p, 4);
      return v;
    }
    case TokenDType::kI64: {
      int64_t v;
      std::memcpy(&v, p, 8);
      return static_cast<int32_t>(v);
    }
    default:
      return 0;
  }
}

void IndexedDataset::Read(int64_t begin, int64_t n, int32_t* out) const {
  MOE_CHECK(begin >= 0 && begin + n <= total_tokens_)
      << "read [" << begin << ", " << begin + n << ") of " << total_tokens_;
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
    : prefix_(std::move(prefix)),
      vocab_size_(vocab_size),
      dtype_(vocab_size < 65500 ? TokenDType::kU16 : TokenDType::kI32) {}

Status IndexedDatasetWriter::AddDocument(const std::vector<int32_t>& tokens) {
  const size_t item = ItemSize(dtype_);
  pointers_.push_back(static_cast<int64_t>(bin_.size()));
  lengths_.push_back(static_cast<int32_t>(tokens.size()));
  for (int32_t t : tokens) {
    if (t < 0 || t >= vocab_size_)
      return InvalidArgumentError("token id " + std::to_string(t) + " outside vocab_size " +
                                  std::to_string(vocab_size_));
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

}  // namespace moe::data
