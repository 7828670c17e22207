#include "common/pipeline_layout.h"

#include <cctype>

#include "common/job_spec_types.h"

namespace moe {
namespace {

std::string Int(int64_t v) { return std::to_string(v); }

// Expands `X*N` and `(...)*N` in s[*pos, end of group); the result is letters and '|'.
class LayoutExpander {
 public:
  LayoutExpander(const std::string& text, const std::string& path) : s_(text), path_(path) {}

  StatusOr<std::string> Run() {
    MOE_ASSIGN_OR_RETURN(std::string out, Sequence(0));
    if (pos_ < s_.size()) return Error("unmatched ')'");
    return out;
  }

 private:
  StatusOr<std::string> Sequence(int depth) {
    if (depth > 8) return Error("groups nested deeper than 8");
    std::string out;
    while (pos_ < s_.size()) {
      const char c = s_[pos_];
      if (c == ')') return out;  // the caller consumes it (Run() reports one at the top level)
      ++pos_;
      if (std::isspace(static_cast<unsigned char>(c)) || c == ',') continue;
      std::string item;
      if (c == '(') {
        MOE_ASSIGN_OR_RETURN(item, Sequence(depth + 1));
        if (pos_ >= s_.size() || s_[pos_] != ')') return Error("'(' without its ')'");
        ++pos_;
      } else if (c == 'E' || c == 't' || c == 'm' || c == 'L' || c == '|') {
        item = std::string(1, c);
      } else {
        return Error(std::string("unknown letter '") + c + "' (E, t, m, L, |, X*N, (...)*N)");
      }
      MOE_ASSIGN_OR_RETURN(const int64_t n, Repeat());
      for (int64_t i = 0; i < n; ++i) out += item;
      if (out.size() > (1u << 20)) return Error("expands to more than a million letters");
    }
    return out;
  }

  // "*N" after an item (1 without).
  StatusOr<int64_t> Repeat() {
    while (pos_ < s_.size() && s_[pos_] == ' ') ++pos_;
    if (pos_ >= s_.size() || s_[pos_] != '*') return int64_t{1};
    ++pos_;
    int64_t n = 0;
    size_t digits = 0;
    while (pos_ < s_.size() && std::isdigit(static_cast<unsigned char>(s_[pos_])) && digits < 7) {
      n = n * 10 + (s_[pos_++] - '0');
      ++digits;
    }
    if (digits == 0) return Error("'*' must be followed by a count");
    return n;
  }

  Status Error(const std::string& what) const {
    return InvalidArgumentError(path_ + ": " + what + " at character " +
                                Int(static_cast<int64_t>(pos_)) + " of '" + s_ + "'");
  }

  const std::string& s_;
  const std::string& path_;
  size_t pos_ = 0;
};

// One stage's letters in the order E, t..., m..., L.
StatusOr<StageLayout> ParseStage(const std::string& letters, const std::string& path) {
  StageLayout st;
  int phase = 0;  // 0: E allowed, 1: t, 2: m, 3: after L
  const auto bad = [&](const std::string& why) {
    return InvalidArgumentError(path + ": '" + letters + "': " + why +
                                " (a stage holds E, then t's, then m's, then L)");
  };
  for (char c : letters) {
    if (phase == 3) return bad("nothing may follow L");
    if (c == 'E') {
      if (phase > 0 || st.embedding) return bad("E must come first");
      st.embedding = true;
      phase = 1;
    } else if (c == 't') {
      if (phase > 1) return bad("a block after an MTP depth");
      ++st.num_layers;
      phase = 1;
    } else if (c == 'm') {
      ++st.mtp;
      phase = 2;
    } else {
      st.loss = true;
      phase = 3;
    }
  }
  return st;
}

Status CheckStages(const std::vector<StageLayout>& stages, const ModelConfig& m,
                   const std::string& path) {
  int64_t layers = 0, mtp = 0, embeddings = 0, losses = 0;
  for (size_t v = 0; v < stages.size(); ++v) {
    const StageLayout& s = stages[v];
    const std::string where = path + "[stage " + Int(static_cast<int64_t>(v)) + "]";
    if (s.embedding && v != 0)
      return InvalidArgumentError(where + ": E (the embedding) belongs to the first stage");
    if (s.loss && v + 1 != stages.size())
      return InvalidArgumentError(where + ": L (the loss) belongs to the last stage");
    if (s.mtp > 0 && v + 1 != stages.size()) {
      return InvalidArgumentError(where + ": m (MTP) belongs to the last stage, with L");
    }
    layers += s.num_layers;
    mtp += s.mtp;
    embeddings += s.embedding ? 1 : 0;
    losses += s.loss ? 1 : 0;
  }
  if (embeddings != 1)
    return InvalidArgumentError(path + ": the first stage must start with E (the embedding)");
  if (losses != 1)
    return InvalidArgumentError(path + ": the last stage must end with L (the loss)");
  if (layers != m.num_layers) {
    return InvalidArgumentError(
        path + ": holds " + Int(layers) +
        " transformer blocks (t), the model has num_layers = " + Int(m.num_layers));
  }
  if (mtp != m.mtp_depth && !(mtp == 0 && !m.MtpTrains())) {
    return InvalidArgumentError(path + ": holds " + Int(mtp) +
                                " MTP depths (m), the model has mtp_depth = " + Int(m.mtp_depth) +
                                " (put them on the last stage, before L)");
  }
  return OkStatus();
}

}  // namespace

StatusOr<std::vector<std::string>> ExpandPipelineLayout(const std::vector<std::string>& layout,
                                                        const std::string& path) {
  std::string joined;
  for (size_t i = 0; i < layout.size(); ++i) joined += (i > 0 ? "|" : "") + layout[i];
  MOE_ASSIGN_OR_RETURN(const std::string letters, LayoutExpander(joined, path).Run());
  std::vector<std::string> stages(1);
  for (char c : letters) {
    if (c == '|') {
      stages.emplace_back();
    } else {
      stages.back() += c;
    }
  }
  return stages;
}

std::vector<StageLayout> EvenPipelineLayout(const ModelConfig& model, int64_t stages) {
  std::vector<StageLayout> out(static_cast<size_t>(std::max<int64_t>(1, stages)));
  const int64_t n = static_cast<int64_t>(out.size());
  const int64_t base = model.num_layers / n, extra = model.num_layers % n;
  int64_t next = 0;
  for (int64_t v = 0; v < n; ++v) {
    StageLayout& s = out[static_cast<size_t>(v)];
    // The extra blocks (fewer than n) go to the stages after the first, which holds the embedding.
    const bool one_more = v >= 1 && v <= extra;
    s.first_layer = next;
    s.num_layers = base + (one_more ? 1 : 0);
    next += s.num_layers;
  }
  out.front().embedding = true;
  out.back().loss = true;
  out.back().mtp = model.MtpTrains() ? model.mtp_depth : 0;
  return out;
}

StatusOr<std::vector<StageLayout>> ResolvePipelineLayout(const JobSpec& spec) {
  const ParallelismConfig& p = spec.parallelism;
  const int64_t want = p.pipeline_parallel * p.virtual_pipeline;
  if (p.pipeline_layout.empty()) return EvenPipelineLayout(spec.model, want);
  const std::string path = "spec.parallelism.pipeline_layout";
  MOE_ASSIGN_OR_RETURN(const std::vector<std::string> texts,
                       ExpandPipelineLayout(p.pipeline_layout, path));
  if (static_cast<int64_t>(texts.size()) != want) {
    return InvalidArgumentError(
        path + ": " + Int(static_cast<int64_t>(texts.size())) +
        " stages, pipeline_parallel x virtual_pipeline = " + Int(p.pipeline_parallel) + " x " +
        Int(p.virtual_pipeline) + " = " + Int(want));
  }
  std::vector<StageLayout> stages;
  int64_t next = 0;
  for (size_t v = 0; v < texts.size(); ++v) {
    MOE_ASSIGN_OR_RETURN(
        StageLayout s, ParseStage(texts[v], path + "[stage " + Int(static_cast<int64_t>(v)) + "]"));
    s.first_layer = next;
    next += s.num_layers;
    stages.push_back(s);
  }
  MOE_RETURN_IF_ERROR(CheckStages(stages, spec.model, path));
  if (!spec.model.MtpTrains()) stages.back().mtp = 0;
  return stages;
}

std::string StageLayoutString(const StageLayout& s) {
  std::string out = s.embedding ? "E" : "";
  if (s.num_layers == 1) out += "t";
  if (s.num_layers > 1) out += "t*" + Int(s.num_layers);
  if (s.mtp == 1) out += "m";
  if (s.mtp > 1) out += "m*" + Int(s.mtp);
  if (s.loss) out += "L";
  return out.empty() ? "(empty)" : out;
}

}  // namespace moe
