#include "worker/engine/data/tokenizer.h"

#include "common/file_util.h"
#include "common/yaml.h"

#ifdef MOE_WITH_SPM
#include <sentencepiece_processor.h>
#endif

namespace moe::data {

#ifdef MOE_WITH_SPM
struct Tokenizer::Impl {
  sentencepiece::SentencePieceProcessor sp;
};

StatusOr<Tokenizer> Tokenizer::Load(const std::string& path) {
  auto impl = std::make_unique<Impl>();
  if (auto st = impl->sp.Load(path); !st.ok())
    return InvalidArgumentError("tokenizer " + path + ": cannot load: " + st.ToString());
  return Tokenizer(std::move(impl), path);
}

StatusOr<std::vector<int32_t>> Tokenizer::Encode(const std::string& text) const {
  std::vector<int> ids;
  if (auto st = impl_->sp.Encode(text, &ids); !st.ok())
    return InvalidArgumentError("tokenizer " + path_ + ": cannot encode: " + st.ToString());
  return std::vector<int32_t>(ids.begin(), ids.end());
}

std::string Tokenizer::Decode(const std::vector<int32_t>& ids) const {
  std::string out;
  (void)impl_->sp.Decode(std::vector<int>(ids.begin(), ids.end()), &out);
  return out;
}

int64_t Tokenizer::vocab_size() const { return impl_->sp.GetPieceSize(); }
int64_t Tokenizer::bos_id() const { return impl_->sp.bos_id(); }
int64_t Tokenizer::eos_id() const { return impl_->sp.eos_id(); }
int64_t Tokenizer::pad_id() const { return impl_->sp.pad_id(); }
int64_t Tokenizer::unk_id() const { return impl_->sp.unk_id(); }
std::string Tokenizer::Piece(int64_t id) const {
  return id < 0 ? std::string() : impl_->sp.IdToPiece(static_cast<int>(id));
}
#else
struct Tokenizer::Impl {};

StatusOr<Tokenizer> Tokenizer::Load(const std::string& path) {
  return FailedPreconditionError("tokenizer " + path +
                                 ": this build has no SentencePiece (libsentencepiece-dev)");
}
StatusOr<std::vector<int32_t>> Tokenizer::Encode(const std::string&) const {
  return FailedPreconditionError("no SentencePiece in this build");
}
std::string Tokenizer::Decode(const std::vector<int32_t>&) const { return std::string(); }
int64_t Tokenizer::vocab_size() const { return 0; }
int64_t Tokenizer::bos_id() const { return -1; }
int64_t Tokenizer::eos_id() const { return -1; }
int64_t Tokenizer::pad_id() const { return -1; }
int64_t Tokenizer::unk_id() const { return -1; }
std::string Tokenizer::Piece(int64_t) const { return std::string(); }
#endif

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl, std::string path)
    : impl_(std::move(impl)), path_(std::move(path)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

StatusOr<std::string> RunTokenizerPath(const std::string& data_path) {
  const std::string meta = data_path + ".json";
  if (!PathExists(meta))
    return NotFoundError(meta +
                         " (moe-prep's description of the data, naming its tokenizer) is "
                         "missing");
  MOE_ASSIGN_OR_RETURN(const std::string text, ReadFileToString(meta));
  MOE_ASSIGN_OR_RETURN(const Node n, ParseYaml(text));
  const Node* t = n.Find("tokenizer");
  if (t == nullptr || t->IsNull() || t->scalar().empty())
    return NotFoundError(meta + " names no tokenizer");
  if (!PathExists(t->scalar()))
    return NotFoundError(meta + " names the tokenizer " + t->scalar() + ", which is missing");
  return t->scalar();
}

}  // namespace moe::data
