// cuDNN's fused SDPA through the frontend's graph API. The frontend is compiled with dynamic
// loading (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING): it calls cuDNN through cudnn_dlhandle, which
// LoadCudnn sets, so no binary links libcudnn and a machine without it loses only this path.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include "kernels/cuda/sm90a/cudnn_attention.h"

#include <dlfcn.h>

#include <cmath>
#include <memory>
#include <mutex>

#include "cudnn_frontend.h"
#include "kernels/cuda/cublas_api.h"  // OpenToolkitLibrary

namespace cudnn_frontend {
void* cudnn_dlhandle = nullptr;  // the frontend's handle on libcudnn (cudnn_frontend_shim.h)
}  // namespace cudnn_frontend

namespace moe::kernels::cuda::sm90a {
namespace {

namespace fe = cudnn_frontend;
using TensorPtr = std::shared_ptr<fe::graph::Tensor_attributes>;

std::string VersionText(size_t v) {  // cudnnGetVersion: major * 10000 + minor * 100 + patch (9.x)
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." +
         std::to_string(v % 100);
}

CudnnRuntime Load() {
  CudnnRuntime r;
  std::string tried;
  void* lib = OpenToolkitLibrary("libcudnn.so." + std::to_string(CUDNN_MAJOR), &tried);
  if (lib == nullptr) {
    r.why = "libcudnn.so." + std::to_string(CUDNN_MAJOR) + " not found (tried " + tried + ")";
    return r;
  }
  auto get_version = reinterpret_cast<size_t (*)()>(dlsym(lib, "cudnnGetVersion"));
  if (get_version == nullptr) {
    r.why = "libcudnn has no cudnnGetVersion";
    return r;
  }
  Dl_info info{};
  r.where = dladdr(reinterpret_cast<void*>(get_version), &info) != 0 && info.dli_fname != nullptr
                ? info.dli_fname
                : "libcudnn.so." + std::to_string(CUDNN_MAJOR);
  r.version = VersionText(get_version());
  r.found = true;
  fe::cudnn_dlhandle = lib;
  return r;
}

// [batch, heads, seq, dim] dims over BSHD memory: a token's heads side by side.
TensorPtr Bshd(fe::graph::Graph& g, const char* name, int64_t uid, const SdpaShape& s, int64_t d) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name(name)
                      .set_uid(uid)
                      .set_dim({s.batch, s.heads, s.seq, d})
                      .set_stride({s.seq * s.heads * d, d, s.heads * d, 1}));
}

void SetOutput(const TensorPtr& t, int64_t uid, const SdpaShape& s, int64_t d) {
  t->set_output(true)
      .set_uid(uid)
      .set_dim({s.batch, s.heads, s.seq, d})
      .set_stride({s.seq * s.heads * d, d, s.heads * d, 1});
}

TensorPtr Stats(fe::graph::Graph& g, const SdpaShape& s) {
  return g.tensor(fe::graph::Tensor_attributes()
                      .set_name("stats")
                      .set_uid(5)
                      .set_dim({s.batch, s.heads, s.seq, 1})
                      .set_stride({s.heads * s.seq, s.seq, 1, 1})
                      .set_data_type(fe::DataType_t::FLOAT));
}

// sm > 0: the graph targets that architecture (90: Hopper) without asking a device, so the host
// checks run on a machine without a GPU; 0: the current device's.
std::shared_ptr<fe::graph::Graph> NewGraph(int sm) {
  auto g = std::make_shared<fe::graph::Graph>();
  if (sm > 0) g->set_sm_version(sm);
  g->set_io_data_type(fe::DataType_t::BFLOAT16)
      .set_intermediate_data_type(fe::DataType_t::FLOAT)
      .set_compute_data_type(fe::DataType_t::FLOAT);
  return g;
}

// uids: q 1, k 2, v 3, o 4, stats 5, dO 6, dQ 7, dK 8, dV 9.
std::shared_ptr<fe::graph::Graph> ForwardGraph(const SdpaShape& s, int sm) {
  auto g = NewGraph(sm);
  auto q = Bshd(*g, "q", 1, s, s.qk_dim), k = Bshd(*g, "k", 2, s, s.qk_dim),
       v = Bshd(*g, "v", 3, s, s.v_dim);
  auto attrs = fe::graph::SDPA_attributes()
                   .set_name("sdpa")
                   .set_generate_stats(true)
                   .set_causal_mask(s.causal)
                   .set_attn_scale(1.0f / std::sqrt(static_cast<float>(s.qk_dim)));
  auto [o, stats] = g->sdpa(q, k, v, attrs);
  SetOutput(o, 4, s, s.v_dim);
  stats->set_output(true).set_uid(5).set_data_type(fe::DataType_t::FLOAT);
  return g;
}

std::shared_ptr<fe::graph::Graph> BackwardGraph(const SdpaShape& s, int sm) {
  auto g = NewGraph(sm);
  auto q = Bshd(*g, "q", 1, s, s.qk_dim), k = Bshd(*g, "k", 2, s, s.qk_dim),
       v = Bshd(*g, "v", 3, s, s.v_dim), o = Bshd(*g, "o", 4, s, s.v_dim),
       d_o = Bshd(*g, "dO", 6, s, s.v_dim);
  auto attrs = fe::graph::SDPA_backward_attributes()
                   .set_name("sdpa_backward")
                   .set_causal_mask(s.causal)
                   .set_attn_scale(1.0f / std::sqrt(static_cast<float>(s.qk_dim)));
  auto [dq, dk, dv] = g->sdpa_backward(q, k, v, o, d_o, Stats(*g, s), attrs);
  SetOutput(dq, 7, s, s.qk_dim);
  SetOutput(dk, 8, s, s.qk_dim);
  SetOutput(dv, 9, s, s.v_dim);
  return g;
}

std::string Problem(const char* graph, const char* step, fe::error_t e) {
  return std::string(graph) + ": " + step + ": " + e.get_message();
}

std::string Validate(const char* name, fe::graph::Graph& g) {
  if (auto e = g.validate(); e.is_bad()) return Problem(name, "validate", e);
  return "";
}

std::string Build(const char* name, fe::graph::Graph& g, cudnnHandle_t handle) {
  if (auto e = g.validate(); e.is_bad()) return Problem(name, "validate", e);
  if (auto e = g.build_operation_graph(handle); e.is_bad()) return Problem(name, "lower", e);
  if (auto e = g.create_execution_plans({fe::HeurMode_t::A}); e.is_bad())
    return Problem(name, "heuristics", e);
  if (auto e = g.check_support(handle); e.is_bad()) return Problem(name, "support", e);
  if (auto e = g.build_plans(handle); e.is_bad()) return Problem(name, "build", e);
  return "";
}

}  // namespace

std::string CudnnFrontendVersion() {
  return std::to_string(CUDNN_FRONTEND_MAJOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_MINOR_VERSION) + "." +
         std::to_string(CUDNN_FRONTEND_PATCH_VERSION);
}

const CudnnRuntime& LoadCudnn() {
  static const CudnnRuntime runtime = Load();
  return runtime;
}

std::string ValidateSdpaGraphs(const SdpaShape& s) {
  if (!LoadCudnn().found) return "cuDNN: " + LoadCudnn().why;
  try {
    auto fwd = ForwardGraph(s, 90);
    auto bwd = BackwardGraph(s, 90);
    std::string why = Validate("sdpa forward", *fwd);
    return why.empty() ? Validate("sdpa backward", *bwd) : why;
  } catch (
      const std::exception& e) {  // the frontend throws where it cannot even describe the graph
    return std::string("cuDNN frontend: ") + e.what();
  }
}

std::string BuildSdpaPlans(const SdpaShape& s) {
  if (!LoadCudnn().found) return "cuDNN: " + LoadCudnn().why;
  cudnnHandle_t handle = nullptr;
  if (fe::detail::create_handle(&handle) != CUDNN_STATUS_SUCCESS)
    return "cuDNN: cudnnCreate failed (no usable GPU?)";
  std::string why;
  try {
    auto fwd = ForwardGraph(s, 0);
    why = Build("sdpa forward", *fwd, handle);
    if (why.empty()) {
      auto bwd = BackwardGraph(s, 0);
      why = Build("sdpa backward", *bwd, handle);
    }
  } catch (const std::exception& e) {
    why = std::string("cuDNN frontend: ") + e.what();
  }
  fe::detail::destroy_handle(handle);
  return why;
}

}  // namespace moe::kernels::cuda::sm90a
