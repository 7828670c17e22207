// moe-prep: text files or folders -> a SentencePiece BPE tokenizer (trained here, or given) -> a
// Megatron indexed dataset (<output>.bin/.idx) plus <output>.json describing it.
//
// Documents: each file is split into documents at lines holding only "%" (the fortune format) or at
// blank-line runs of --doc-sep-blank lines; every document ends with the end-of-document token.
#include <sentencepiece_processor.h>
#include <sentencepiece_trainer.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "common/args.h"
#include "common/file_util.h"
#include "common/job_spec.h"
#include "common/log.h"
#include "common/yaml.h"
#include "worker/engine/data/indexed_dataset.h"
#include "worker/engine/data/sampler.h"

namespace fs = std::filesystem;

namespace {

int Fail(const std::string& msg) {
  std::fprintf(stderr, "moe-prep: %s\n", msg.c_str());
  return 1;
}

// Text files under the inputs (recursively), skipping binary files (NUL bytes) and fortune's .dat.
std::vector<std::string> CollectFiles(const std::vector<std::string>& inputs, std::string* error) {
  std::vector<std::string> files;
  for (const auto& in : inputs) {
    std::error_code ec;
    if (fs::is_regular_file(in, ec)) {
      files.push_back(in);
    } else if (fs::is_directory(in, ec)) {
      for (auto it = fs::recursive_directory_iterator(in, ec);
           it != fs::recursive_directory_iterator(); ++it) {
        if (!it->is_regular_file()) continue;
        const std::string p = it->path().string();
        if (p.size() > 4 && (p.substr(p.size() - 4) == ".dat" || p.substr(p.size() - 3) == ".u8"))
          continue;
        files.push_back(p);
      }
    } else {
      *error = "--input: '" + in + "' is neither a file nor a folder";
      return {};
    }
  }
  std::sort(files.begin(), files.end());
  return files;
}

std::vector<std::string> SplitDocuments(const std::string& text) {
  std::vector<std::string> docs;
  std::string cur, line;
  std::istringstream in(text);
  int blank = 0;
  auto flush = [&] {
    size_t b = cur.find_first_not_of(" \n\t");
    if (b != std::string::npos) docs.push_back(cur.substr(b));
    cur.clear();
  };
  while (std::getline(in, line)) {
    if (line == "%") {
      flush();
      blank = 0;
      continue;
    }
    if (line.find_first_not_of(" \t\r") == std::string::npos) {
      if (++blank >= 2) {
        flush();
        blank = 0;
        continue;
      }
    } else {
      blank = 0;
    }
    cur += line;
    cur += '\n';
  }
  flush();
  return docs;
}

bool LooksBinary(const std::string& s) { return s.find('\0') != std::string::npos; }

// --split: the train, valid and test ranges of the dataset at `prefix`. Megatron's split is by
// documents, so each range's share of the tokens follows its documents' lengths: it is printed, and
// a share more than 5 points off its weight is called out (a corpus of a few long documents).
int PrintSplit(const std::string& prefix, const std::string& split) {
  auto weights = moe::ParseSplit(split, "--split");
  if (!weights.ok()) return Fail(weights.status().message());
  auto ds = moe::data::IndexedDataset::Open(prefix, 0);
  if (!ds.ok()) return Fail(ds.status().message());
  std::printf("split %s of %s: %lld documents, %lld tokens\n", split.c_str(), prefix.c_str(),
              static_cast<long long>((*ds)->num_documents()),
              static_cast<long long>((*ds)->num_tokens()));
  const double total_weight = (*weights)[0] + (*weights)[1] + (*weights)[2];
  const double tokens = static_cast<double>(std::max<int64_t>((*ds)->num_tokens(), 1));
  std::string notes;
  int i = 0;
  for (moe::data::DataSplit s :
       {moe::data::DataSplit::kTrain, moe::data::DataSplit::kValid, moe::data::DataSplit::kTest}) {
    const moe::data::DataRange r = moe::data::SplitRange(**ds, *weights, s);
    const double share = 100.0 * static_cast<double>(r.end_token - r.begin_token) / tokens;
    const double want = 100.0 * (*weights)[static_cast<size_t>(i++)] / total_weight;
    std::printf(
        "  %-5s documents %lld-%lld (%lld), tokens %lld-%lld (%lld): %.1f %% of the tokens\n",
        moe::data::DataSplitName(s), static_cast<long long>(r.first_doc),
        static_cast<long long>(r.end_doc), static_cast<long long>(r.end_doc - r.first_doc),
        static_cast<long long>(r.begin_token), static_cast<long long>(r.end_token),
        static_cast<long long>(r.end_token - r.begin_token), share);
    if (std::abs(share - want) > 5) {
      char buf[200];
      std::snprintf(buf, sizeof(buf),
                    "  note: %s holds %.1f %% of the tokens for a weight of %.1f %%\n",
                    moe::data::DataSplitName(s), share, want);
      notes += buf;
    }
  }
  std::printf(
      "(the split is by documents, as Megatron's: the token shares follow the documents' "
      "lengths)\n%s",
      notes.c_str());
  return 0;
}

// The text documents of `files` (binary files skipped).
moe::StatusOr<std::vector<std::string>> ReadDocuments(const std::vector<std::string>& files) {
  std::vector<std::string> docs;
  size_t bytes = 0;
  for (const auto& f : files) {
    MOE_ASSIGN_OR_RETURN(std::string text, moe::ReadFileToString(f));
    if (LooksBinary(text)) continue;
    bytes += text.size();
    for (auto& d : SplitDocuments(text)) docs.push_back(std::move(d));
  }
  if (docs.empty()) return moe::InvalidArgumentError("no text documents found under the inputs");
  std::fprintf(stderr, "moe-prep: %zu files, %zu documents, %.1f MB of text\n", files.size(),
               docs.size(), static_cast<double>(bytes) / 1e6);
  return docs;
}

// Trains a BPE tokenizer on `docs`; returns its model file (<model_prefix>.model).
moe::StatusOr<std::string> TrainTokenizer(const std::string& output,
                                          const std::string& model_prefix, int64_t vocab_size,
                                          const std::vector<std::string>& docs) {
  const std::string corpus = output + ".corpus.txt";
  {
    std::ofstream out(corpus);
    for (const auto& d : docs) {
      std::istringstream in(d);
      std::string line;
      while (std::getline(in, line)) {
        if (!line.empty()) out << line << "\n";
      }
    }
  }
  const auto t0 = std::chrono::steady_clock::now();
  std::fprintf(stderr, "moe-prep: training a BPE tokenizer with %lld tokens...\n",
               static_cast<long long>(vocab_size));
  std::ostringstream spec;
  // Byte fallback keeps every input encodable; ids 0-3 are unk, bos, eos (our end of document),
  // pad.
  spec
      << "--input=" << corpus << " --model_prefix=" << model_prefix
      << " --vocab_size=" << vocab_size
      << " --model_type=bpe --character_coverage=1.0 --byte_fallback=true --split_digits=true"
      << " --unk_id=0 --bos_id=1 --eos_id=2 --pad_id=3 --num_threads=2 --minloglevel=2"
      << " --max_sentence_length=16384 --input_sentence_size=2000000 --shuffle_input_sentence=true";
  auto st = sentencepiece::SentencePieceTrainer::Train(spec.str());
  std::remove(corpus.c_str());
  if (!st.ok())
    return moe::InternalError("tokenizer training failed: " + std::string(st.ToString()));
  const std::string model = model_prefix + ".model";
  std::fprintf(stderr, "moe-prep: tokenizer %s trained in %.1f s\n", model.c_str(),
               std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
  return model;
}

// Encodes every document with the tokenizer (an end-of-document id after each) into
// <output>.bin/.idx.
moe::Status Encode(const std::string& output, const std::string& tokenizer,
                   const std::vector<std::string>& docs, const std::vector<std::string>& inputs) {
  sentencepiece::SentencePieceProcessor sp;
  if (auto st = sp.Load(tokenizer); !st.ok()) {
    return moe::InvalidArgumentError("--tokenizer: cannot load '" + tokenizer +
                                     "': " + st.ToString());
  }
  const int64_t vocab = sp.GetPieceSize();
  const int eod = sp.eos_id() >= 0 ? sp.eos_id() : 0;
  moe::data::IndexedDatasetWriter writer(output, vocab);
  for (size_t i = 0; i < docs.size(); ++i) {
    std::vector<int> ids;
    if (auto st = sp.Encode(docs[i], &ids); !st.ok())
      return moe::InternalError("encoding failed: " + st.ToString());
    std::vector<int32_t> toks(ids.begin(), ids.end());
    toks.push_back(eod);
    MOE_RETURN_IF_ERROR(writer.AddDocument(toks));
    if ((i + 1) % 5000 == 0)
      std::fprintf(stderr, "moe-prep: encoded %zu/%zu documents\n", i + 1, docs.size());
  }
  moe::Node meta = moe::Node::Map();
  meta.Set("vocab_size", moe::Node::Scalar(std::to_string(vocab)));
  meta.Set("tokenizer", moe::Node::Scalar(fs::absolute(tokenizer).string(), true));
  meta.Set("eod_id", moe::Node::Scalar(std::to_string(eod)));
  meta.Set("documents", moe::Node::Scalar(std::to_string(writer.documents())));
  meta.Set("tokens", moe::Node::Scalar(std::to_string(writer.tokens())));
  moe::Node srcs = moe::Node::List();
  for (const auto& in : inputs) srcs.Append(moe::Node::Scalar(in, true));
  meta.Set("inputs", std::move(srcs));
  MOE_RETURN_IF_ERROR(writer.Finish(moe::ToJson(meta, 2) + "\n"));
  std::fprintf(stderr, "moe-prep: wrote %s.bin/.idx: %lld documents, %lld tokens, vocab %lld\n",
               output.c_str(), static_cast<long long>(writer.documents()),
               static_cast<long long>(writer.tokens()), static_cast<long long>(vocab));
  return moe::OkStatus();
}

struct PrepFlags {
  std::vector<std::string> inputs;
  std::string output, tokenizer, model_prefix, split;
  int64_t vocab_size = 2048;
};

moe::Status Prepare(PrepFlags& f) {
  if (f.vocab_size < 16 || f.vocab_size > 1000000) {
    return moe::InvalidArgumentError("--vocab-size: must be in [16, 1000000], got " +
                                     std::to_string(f.vocab_size));
  }
  std::string error;
  const std::vector<std::string> files = CollectFiles(f.inputs, &error);
  if (!error.empty()) return moe::InvalidArgumentError(error);
  MOE_ASSIGN_OR_RETURN(const std::vector<std::string> docs, ReadDocuments(files));
  MOE_RETURN_IF_ERROR(moe::MakeDirs(moe::DirName(f.output)));
  if (f.tokenizer.empty()) {
    if (f.model_prefix.empty()) f.model_prefix = f.output + ".tokenizer";
    MOE_ASSIGN_OR_RETURN(f.tokenizer, TrainTokenizer(f.output, f.model_prefix, f.vocab_size, docs));
  }
  return Encode(f.output, f.tokenizer, docs, f.inputs);
}

}  // namespace

int main(int argc, char** argv) {
  PrepFlags f;
  moe::ArgParser args(
      "moe-prep", "Tokenizes text files or folders into a Megatron indexed dataset (.bin/.idx).");
  args.AddStrings("input", &f.inputs, "text file or folder (repeatable)");
  args.AddString("output", &f.output,
                 "output prefix: writes <prefix>.bin, <prefix>.idx, <prefix>.json");
  args.AddString("tokenizer", &f.tokenizer,
                 "an existing SentencePiece model to use instead of training one");
  args.AddString("model-prefix", &f.model_prefix,
                 "where to write the trained tokenizer (default: <output>.tokenizer)");
  args.AddInt("vocab-size", &f.vocab_size,
              "vocabulary of the BPE tokenizer to train (default 2048)");
  args.AddString(
      "split", &f.split,
      "print the train/valid/test documents and tokens of data.split weights (\"969,30,1\"; "
      "the split is by documents, so the token shares follow their lengths); "
      "without --input, of the existing dataset at --output");
  args.Require("output");
  if (moe::Status st = args.Parse(argc, argv); !st.ok()) return Fail(st.message());
  if (args.help_requested()) {
    std::printf("%s", args.Usage().c_str());
    return 0;
  }
  if (f.inputs.empty()) {
    return f.split.empty() ? Fail("--input: required (or --split alone, for an existing dataset)")
                           : PrintSplit(f.output, f.split);
  }
  if (moe::Status st = Prepare(f); !st.ok()) return Fail(st.message());
  return f.split.empty() ? 0 : PrintSplit(f.output, f.split);
}
