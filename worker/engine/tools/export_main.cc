// moe-export: a training checkpoint as a Hugging Face DeepseekV3 directory (config.json and
// model.safetensors, split with an index when large) that transformers, vLLM and SGLang load.
//
//   moe-export --checkpoint DIR --output DIR [--dtype bf16|fp32] [--max-file-gb 5]
//   [--no-mtp-table-copies] [--tokenizer FILE | --no-tokenizer]
//   moe-export --hf DIR --output DIR [--dtype bf16|fp32]
//
// DIR may be a checkpoint directory (its newest complete step is taken) or one step_* directory;
// the layout that wrote it does not matter. The run's SentencePiece tokenizer (named by its data's
// <data.path>.json, which moe-prep wrote) goes in as tokenizer.model with tokenizer_config.json and
// generation_config.json, its special ids in config.json. --hf reads a DeepseekV3 directory as
// moe-train --init-from does and writes it again (another dtype; or its own, which gives the same
// bytes: the round trip loses nothing). Exit codes as moe-train's (common/rank_end.h).
#include <cstdio>

#include "common/args.h"
#include "common/rank_end.h"
#include "worker/engine/checkpoint/hf_io.h"

int main(int argc, char** argv) {
  std::string checkpoint, hf, output, dtype, tokenizer;
  double max_file_gb = 5;
  bool no_copies = false, no_tokenizer = false;
  moe::ArgParser args("moe-export",
                      "Writes a training checkpoint as a Hugging Face DeepseekV3 directory.");
  args.AddString("checkpoint", &checkpoint, "checkpoint directory (or one step_* directory in it)");
  args.AddString("hf", &hf, "instead: a DeepseekV3 directory to read and write again");
  args.AddString("output", &output, "the directory to write (created)");
  args.AddString("dtype", &dtype,
                 "bf16 (default for a checkpoint, as released) or fp32; with --hf: its own");
  args.AddDouble("max-file-gb", &max_file_gb,
                 "split into files of at most this size, with model.safetensors.index.json");
  args.AddFlag("no-mtp-table-copies", &no_copies,
               "leave out the MTP layers' copies of the embedding and head");
  args.AddString("tokenizer", &tokenizer,
                 "the SentencePiece model to include (default: the one the run's data names)");
  args.AddFlag("no-tokenizer", &no_tokenizer, "write no tokenizer files");
  args.Require("output");
  if (moe::Status st = args.Parse(argc, argv); !st.ok()) {
    std::fprintf(stderr, "moe-export: %s\n", st.message().c_str());
    return moe::kExitBadInput;
  }
  if (args.help_requested()) {
    std::printf("%s", args.Usage().c_str());
    return moe::kExitOk;
  }
  if (checkpoint.empty() == hf.empty()) {
    std::fprintf(stderr, "moe-export: --checkpoint or --hf: give exactly one\n");
    return moe::kExitBadInput;
  }
  if (!hf.empty()) {
    if (!dtype.empty() && dtype != "bf16" && dtype != "fp32") {
      std::fprintf(stderr, "moe-export: --dtype: '%s' is not bf16 or fp32\n", dtype.c_str());
      return moe::kExitBadInput;
    }
    if (moe::Status st = moe::checkpoint::RewriteHfDirectory(hf, output, dtype); !st.ok()) {
      std::fprintf(stderr, "moe-export: %s\n", st.ToString().c_str());
      return moe::RankEndFor(st).exit_code();
    }
    std::fprintf(stderr, "moe-export: wrote %s from %s\n", output.c_str(), hf.c_str());
    return moe::kExitOk;
  }
  if (dtype.empty()) dtype = "bf16";
  if (dtype != "bf16" && dtype != "fp32") {
    std::fprintf(stderr, "moe-export: --dtype: '%s' is not bf16 or fp32\n", dtype.c_str());
    return moe::kExitBadInput;
  }
  if (!(max_file_gb > 0)) {
    std::fprintf(stderr, "moe-export: --max-file-gb: must be > 0\n");
    return moe::kExitBadInput;
  }
  if (no_tokenizer && !tokenizer.empty()) {
    std::fprintf(stderr, "moe-export: --tokenizer and --no-tokenizer: give at most one\n");
    return moe::kExitBadInput;
  }
  moe::checkpoint::HfWriteOptions o;
  o.dtype = dtype;
  o.tokenizer = tokenizer;
  o.tokenizer_from_run = !no_tokenizer;
  o.max_file_bytes = static_cast<int64_t>(max_file_gb * (1 << 30));
  o.mtp_table_copies = !no_copies;
  o.progress = [](const std::string& line) {
    std::fprintf(stderr, "moe-export: %s\n", line.c_str());
  };
  if (moe::Status st = moe::checkpoint::ExportCheckpoint(checkpoint, output, o); !st.ok()) {
    std::fprintf(stderr, "moe-export: %s\n", st.ToString().c_str());
    return moe::RankEndFor(st).exit_code();
  }
  std::fprintf(stderr, "moe-export: wrote %s (config.json, %s weights)\n", output.c_str(),
               dtype.c_str());
  return moe::kExitOk;
}
