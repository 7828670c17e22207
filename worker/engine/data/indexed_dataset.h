// Megatron's indexed dataset (the MMIDIDX format): <prefix>.bin holds the token ids of every
// sequence back to back; <prefix>.idx holds
//   "MMIDIDX\0\0" | u64 version = 1 | u8 dtype code | u64 sequence count N | u64 document count D
//   | i32 lengths[N] | i64 byte pointers[N] | i64 document indices[D]
// (little-endian; document indices start at 0 and end at N). A sidecar <prefix>.json written by
// moe-prep records the vocabulary and tokenizer; when present it is checked against the model.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace moe::data {

// Megatron's dtype codes.
enum class TokenDType : uint8_t {
  kU8 = 1,
  kI8 = 2,
  kI16 = 3,
  kI32 = 4,
  kI64 = 5,
  kF64 = 6,
  kF32 = 7,
  kU16 = 8
};

class IndexedDataset {
 public:
  ~IndexedDataset();
  // Opens and validates both files: magic, version, dtype, counts against file sizes, pointers
  // inside the .bin. `vocab_size` > 0 also checks the sidecar's vocabulary and every token id
  // against it.
  static StatusOr<std::unique_ptr<IndexedDataset>> Open(const std::string& prefix,
                                                        int64_t vocab_size);

  int64_t num_sequences() const { return static_cast<int64_t>(lengths_.size()); }
  int64_t num_documents() const { return static_cast<int64_t>(doc_idx_.size()) - 1; }
  int64_t num_tokens() const { return total_tokens_; }
  const std::string& prefix() const { return prefix_; }
  // Token i of the concatenation of all sequences (in file order).
  int32_t Token(int64_t i) const;
  // The first token of document d (0 <= d <= num_documents(); d = num_documents() gives
  // num_tokens()).
  int64_t DocumentTokenBegin(int64_t d) const;
  // Copies tokens [begin, begin + n) of the concatenation.
  void Read(int64_t begin, int64_t n, int32_t* out) const;

 private:
  IndexedDataset() = default;
  // The phases of Open.
  Status ParseIndex(const std::string& idx, const std::string& idx_path);
  Status MapData(const std::string& bin_path);
  Status CheckLayout(const std::string& idx_path, const std::string& bin_path);
  Status CheckVocab(int64_t vocab_size) const;

  std::string prefix_;
  TokenDType dtype_ = TokenDType::kU16;
  size_t item_size_ = 2;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> pointers_;
  std::vector<int64_t> doc_idx_;
  int64_t total_tokens_ = 0;
  const uint8_t* bin_ = nullptr;
  size_t bin_size_ = 0;
};

// Writes a dataset: call AddDocument per document, then Finish. Token ids are stored as uint16 when
// the vocabulary fits (< 65500, as Megatron does), else int32.
class IndexedDatasetWriter {
 public:
  IndexedDatasetWriter(std::string prefix, int64_t vocab_size);
  Status AddDocument(const std::vector<int32_t>& tokens);
  // Writes .bin and .idx (each to a temporary name, then renamed) and the sidecar JSON.
  Status Finish(const std::string& sidecar_json);
  int64_t tokens() const { return tokens_; }
  int64_t documents() const { return static_cast<int64_t>(doc_idx_.size()) - 1; }

 private:
  std::string prefix_;
  int64_t vocab_size_;
  TokenDType dtype_;
  std::string bin_;
  std::vector<int32_t> lengths_;
  std::vector<int64_t> pointers_;
  std::vector<int64_t> doc_idx_{0};
  int64_t tokens_ = 0;
};

}  // namespace moe::data
