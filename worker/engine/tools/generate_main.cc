// moe-generate: text from a trained model, with its tokenizer.
//
//   moe-generate (--checkpoint DIR | --hf DIR) (--prompt TEXT | --prompt-file F)
//                [--max-tokens 64] [--seed 0] [--temperature 0.8] [--top-k 0] [--top-p 0.95]
//                [--tokenizer FILE] [--ignore-eos] [--no-cache]
//                [--device cpu|cuda|cuda:N] [--precision fp32|bf16] [--threads T]
//
// --checkpoint takes the engine's checkpoints (the newest complete step, or one step_* directory)
// and the tokenizer the run's data names (<data.path>.json, moe-prep's); --hf a DeepseekV3
// directory and its tokenizer.model (moe-export writes both). The model is the one that was
// trained: the rotary frequencies of the run's sequence length (YaRN when it applied), no MTP
// heads. The context starts with the end-of-document id, as every training document did (the
// corpus has no BOS), then the prompt; generation stops at the next end of document (unless
// --ignore-eos) or after --max-tokens. Greedy with --temperature 0; otherwise a draw from the
// softmax at that temperature within --top-k and --top-p, from --seed's stream (the same seed, the
// same text). An MLA model decodes with its latent cache (kv_lora_rank + qk_rope_head_dim values
// per position and layer); --no-cache (and an MHA model) runs the whole prefix every step. Prints
// the prompt and its continuation on stdout, and the token counts and tokens/s on stderr. Exit
// codes as moe-train's (common/rank_end.h).
#include <unistd.h>

#include <cstdio>

#include "common/args.h"
#include "common/file_util.h"
#include "common/rank_end.h"
#include "kernels/runtime.h"
#include "worker/engine/checkpoint/hf_io.h"
#include "worker/engine/data/tokenizer.h"
#include "worker/engine/device.h"
#include "worker/engine/model/generation.h"
#include "worker/engine/parallel/local_communicator.h"

namespace {

struct Flags {
  std::string checkpoint, hf, prompt, prompt_file, tokenizer, device = "cpu", precision;
  int64_t max_tokens = 64, seed = 0, top_k = 0, threads = 0;
  double temperature = 0.8, top_p = 0.95;
  bool ignore_eos = false, no_cache = false;
};

moe::Status Check(Flags* f) {
  if (f->checkpoint.empty() == f->hf.empty())
    return moe::InvalidArgumentError("--checkpoint or --hf: give exactly one");
  if (f->prompt.empty() == f->prompt_file.empty())
    return moe::InvalidArgumentError("--prompt or --prompt-file: give exactly one");
  if (f->max_tokens <= 0) return moe::InvalidArgumentError("--max-tokens: must be > 0");
  if (f->temperature < 0) return moe::InvalidArgumentError("--temperature: must be >= 0");
  if (f->top_k < 0) return moe::InvalidArgumentError("--top-k: must be >= 0");
  if (!(f->top_p > 0 && f->top_p <= 1))
    return moe::InvalidArgumentError("--top-p: must be in (0, 1]");
  if (f->seed < 0) return moe::InvalidArgumentError("--seed: must be >= 0");
  if (!f->prompt_file.empty()) {
    MOE_ASSIGN_OR_RETURN(f->prompt, moe::ReadFileToString(f->prompt_file));
  }
  return moe::CheckPrecision(f->precision);
}

moe::Status Parse(int argc, char** argv, Flags* f, bool* help, std::string* usage) {
  moe::ArgParser args("moe-generate",
                      "Text from a checkpoint or a Hugging Face DeepseekV3 directory.");
  args.AddString("checkpoint", &f->checkpoint, "the engine's checkpoint directory (or one step_*)");
  args.AddString("hf", &f->hf, "a DeepseekV3 directory with its tokenizer.model (moe-export's)");
  args.AddString("prompt", &f->prompt, "the text to continue");
  args.AddString("prompt-file", &f->prompt_file, "a file holding the text to continue");
  args.AddInt("max-tokens", &f->max_tokens, "tokens to generate at most (default 64)");
  args.AddInt("seed", &f->seed, "the sampling stream (default 0)");
  args.AddDouble("temperature", &f->temperature, "softmax temperature; 0: greedy (default 0.8)");
  args.AddInt("top-k", &f->top_k, "sample among the k most likely tokens (default 0: all)");
  args.AddDouble("top-p", &f->top_p, "sample within this much probability mass (default 0.95)");
  args.AddString("tokenizer", &f->tokenizer, "the SentencePiece model (default: the model's)");
  args.AddFlag("ignore-eos", &f->ignore_eos, "go on past the end of a document");
  args.AddFlag("no-cache", &f->no_cache, "recompute the whole prefix every step (no KV cache)");
  args.AddString("device", &f->device, "cpu (default), cuda or cuda:N");
  args.AddString("precision", &f->precision, "fp32 or bf16 (default: bf16 on cuda, fp32 on cpu)");
  args.AddInt("threads", &f->threads, "CPU threads (default: all cores)");
  MOE_RETURN_IF_ERROR(args.Parse(argc, argv));
  *help = args.help_requested();
  *usage = args.Usage();
  return *help ? moe::OkStatus() : Check(f);
}

// The model and where its tokenizer is: a checkpoint's job, or an HF directory's config.
struct Source {
  moe::ModelConfig model;
  int64_t rope_length = 0;
  uint64_t seed = 0;
  std::string step_dir, tokenizer;
};

moe::StatusOr<Source> FindSource(const Flags& f) {
  Source s;
  if (!f.checkpoint.empty()) {
    MOE_ASSIGN_OR_RETURN(const moe::JobSpec spec,
                         moe::checkpoint::CheckpointJobSpec(f.checkpoint, &s.step_dir));
    s.model = spec.model;
    s.rope_length = spec.data.seq_length;
    s.seed = spec.training.seed;
    if (f.tokenizer.empty()) {
      moe::StatusOr<std::string> t = moe::data::RunTokenizerPath(spec.data.path);
      if (!t.ok())
        return moe::FailedPreconditionError("the run's tokenizer: " + t.status().message() +
                                            " (give --tokenizer FILE)");
      s.tokenizer = *t;
    }
  } else {
    MOE_ASSIGN_OR_RETURN(s.model, moe::checkpoint::HfModelConfig(f.hf, &s.rope_length));
    s.tokenizer = moe::JoinPath(f.hf, "tokenizer.model");
  }
  if (!f.tokenizer.empty()) s.tokenizer = f.tokenizer;
  s.model.mtp_depth = 0;  // generation reads the main head only
  return s;
}

moe::Status Run(const Flags& f) {
  MOE_ASSIGN_OR_RETURN(const Source src, FindSource(f));
  MOE_ASSIGN_OR_RETURN(const moe::data::Tokenizer tok, moe::data::Tokenizer::Load(src.tokenizer));
  if (tok.vocab_size() > src.model.vocab_size)
    return moe::InvalidArgumentError("--tokenizer " + src.tokenizer + ": " +
                                     std::to_string(tok.vocab_size()) +
                                     " pieces, more than the model's vocabulary");
  MOE_ASSIGN_OR_RETURN(const moe::DevicePlacement place, moe::PlaceRank(f.device, f.precision, 0));
  moe::kernels::SetNumThreads(
      static_cast<int>(f.threads > 0 ? f.threads : ::sysconf(_SC_NPROCESSORS_ONLN)));
  moe::parallel::LocalParallel local;
  moe::model::ModelOptions mo;
  mo.device = place.device;
  mo.compute = place.compute;
  mo.max_seq_len = src.rope_length;
  moe::model::Model model(src.model, local.ctx, src.seed, mo);
  if (!f.checkpoint.empty()) {
    MOE_RETURN_IF_ERROR(moe::checkpoint::LoadCheckpointWeights(src.step_dir, model));
  } else {
    MOE_RETURN_IF_ERROR(moe::checkpoint::LoadHfWeights(f.hf, model, local.ctx));
  }
  MOE_ASSIGN_OR_RETURN(std::vector<int32_t> prompt, tok.Encode(f.prompt));
  if (tok.eos_id() >= 0) prompt.insert(prompt.begin(), static_cast<int32_t>(tok.eos_id()));
  const bool cache = !f.no_cache && src.model.is_mla();
  MOE_ASSIGN_OR_RETURN(moe::model::Generator gen,
                       moe::model::Generator::Create(
                           model, static_cast<int64_t>(prompt.size()) + f.max_tokens, cache));
  moe::model::SamplingOptions so;
  so.temperature = f.temperature;
  so.top_k = f.top_k;
  so.top_p = f.top_p;
  so.seed = static_cast<uint64_t>(f.seed);
  MOE_ASSIGN_OR_RETURN(
      const moe::model::Generation g,
      moe::model::Generate(gen, prompt, f.max_tokens, so, f.ignore_eos ? -1 : tok.eos_id()));
  std::vector<int32_t> text = g.tokens;
  if (!text.empty() && text.back() == tok.eos_id()) text.pop_back();
  std::printf("%s%s\n", f.prompt.c_str(), tok.Decode(text).c_str());
  std::fflush(stdout);
  const double total = g.prompt_seconds + g.decode_seconds;
  std::fprintf(stderr,
               "moe-generate: %zu prompt tokens in %.3f s, %zu tokens generated in %.3f s: %.1f "
               "tokens/s (%s, %s, %s)\n",
               prompt.size(), g.prompt_seconds, g.tokens.size(), total,
               total > 0 ? static_cast<double>(g.tokens.size()) / total : 0.0, place.name.c_str(),
               place.precision.c_str(),
               cache ? "latent KV cache" : "no cache: the whole prefix every step");
  return moe::OkStatus();
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  bool help = false;
  std::string usage;
  if (moe::Status st = Parse(argc, argv, &f, &help, &usage); !st.ok()) {
    std::fprintf(stderr, "moe-generate: %s\n", st.ToString().c_str());
    return moe::RankEndFor(st).exit_code();
  }
  if (help) {
    std::printf("%s", usage.c_str());
    return moe::kExitOk;
  }
  if (moe::Status st = Run(f); !st.ok()) {
    std::fprintf(stderr, "moe-generate: %s\n", st.ToString().c_str());
    return moe::RankEndFor(st).exit_code();
  }
  return moe::kExitOk;
}
