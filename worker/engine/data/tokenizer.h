// The run's SentencePiece tokenizer (moe-prep trains it: BPE with byte fallback, ids 0-3 unk, bos,
// eos (our end of document), pad): text to ids and back, and its special ids for an export.
// Built with SentencePiece when the build found it; without, Load says so.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "common/status.h"

namespace moe::data {

class Tokenizer {
 public:
  // The SentencePiece model file `path` (INVALID_ARGUMENT naming it when unreadable).
  static StatusOr<Tokenizer> Load(const std::string& path);
  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  StatusOr<std::vector<int32_t>> Encode(const std::string& text) const;
  std::string Decode(const std::vector<int32_t>& ids) const;
  int64_t vocab_size() const;
  // The special ids (-1 when the model has none) and their pieces ("<s>", "</s>", ...).
  int64_t bos_id() const;
  int64_t eos_id() const;
  int64_t pad_id() const;
  int64_t unk_id() const;
  std::string Piece(int64_t id) const;
  const std::string& path() const { return path_; }

 private:
  struct Impl;
  Tokenizer(std::unique_ptr<Impl> impl, std::string path);
  std::unique_ptr<Impl> impl_;
  std::string path_;
};

// The tokenizer a run trained with: its data's <path>.json (moe-prep's description) names the
// SentencePiece model. NOT_FOUND, naming what is missing, when there is none.
StatusOr<std::string> RunTokenizerPath(const std::string& data_path);

}  // namespace moe::data
