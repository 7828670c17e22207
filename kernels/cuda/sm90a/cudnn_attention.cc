// cuDNN's fused SDPA through the frontend's graph API. The frontend is compiled with dynamic
// loading (NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING): it calls cuDNN through cudnn_dlhandle, which
// LoadCudnn sets, so no binary links libcudnn and a machine without it loses only this path.
#define NV_CUDNN_FRONTEND_USE_DYNAMIC_LOADING
#include "kernels/cuda/sm90a/cudnn_attention.h"

#include <dlfcn.h>

#include <atomic>
#include <cmath>
#include <cstdlib>
#include <map>
#include <memory>
#include <mutex>
#include <new>
#include <tuple>
#include <unordered_map>

#include "cudnn_frontend.h"
#include "kernels/cuda/cublas_api.h"  // OpenToolkitLibrary
#include "kernels/cuda_backend.h"     // RegisterCudaAllocator, CurrentDevice
#include "kernels/tensor.h"

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
  // The frontend opens a CUDA runtime of its own by name (libcudart.so.12 first): point it at the
  // one this process runs on, unless the user chose one, so that it never drives a second runtime
  // (a cu12 library from a Python wheel) against our stream.
  Dl_info rt{};
  if (dladdr(reinterpret_cast<void*>(&cudaGetDeviceCount), &rt) != 0 && rt.dli_fname != nullptr &&
      std::string(rt.dli_fname).find("libcudart") != std::string::npos)
    setenv("CUDNN_FRONTEND_CUDART_LIB_NAME", rt.dli_fname, 0);
  return r;
}

float Scale(const SdpaShape& s) {  // the callers refuse a scale <= 0 before (attention.cu)
  return s.scale > 0 ? s.scale : 1.0f / std::sqrt(static_cast<float>(s.qk_dim));
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
                   .set_attn_scale(Scale(s));
  auto [o, stats] = g->sdpa(q, k, v, attrs);
  SetOutput(o, 4, s, s.v_dim);
  stats->set_output(true)
      .set_uid(5)
      .set_dim({s.batch, s.heads, s.seq, 1})
      .set_stride({s.heads * s.seq, s.seq, 1, 1})
      .set_data_type(fe::DataType_t::FLOAT);
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
                   .set_attn_scale(Scale(s));
  if (s.deterministic) attrs.set_deterministic_algorithm(true);
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

// The graphs of one shape, built on this thread's handle, with their workspace sizes; or why cuDNN
// cannot run them (kept too: a refused shape is not tried again).
struct Plans {
  std::shared_ptr<fe::graph::Graph> fwd, bwd;
  int64_t fwd_workspace = 0, bwd_workspace = 0;
  std::string fwd_why, bwd_why;  // "" when that direction runs on cuDNN
};

// cuDNN's deterministic backward on Hopper keeps dP in its workspace (about batch x heads x seq^2
// x 2 bytes: 4.3 GB at 128 heads and 4,096 tokens). Above this it is refused and our backward,
// deterministic too (no atomics), runs instead; the forward stays on cuDNN.
constexpr int64_t kMaxDeterministicWorkspace = int64_t{1} << 30;

// Runs successfully on cuDNN (forward and backward), for the checks that must see this path run.
std::atomic<int64_t> g_runs{0};

using PlanKey = std::tuple<int64_t, int64_t, int64_t, int64_t, int64_t, bool, float, bool, int>;

// This thread's cuDNN handle on the current device (the training thread's; made once), or null
// with *why.
cudnnHandle_t ThreadHandle(std::string* why) {
  thread_local cudnnHandle_t handle = nullptr;
  thread_local std::string failed;
  if (handle == nullptr && failed.empty()) {
    if (!LoadCudnn().found)
      failed = "cuDNN: " + LoadCudnn().why;
    else if (fe::detail::create_handle(&handle) != CUDNN_STATUS_SUCCESS)
      failed = "cuDNN: cudnnCreate failed";
  }
  *why = failed;
  return handle;
}

// One direction's graph built on `handle` with its workspace size, or why not (graph reset).
std::string BuildDirection(bool backward, const SdpaShape& s, cudnnHandle_t handle,
                           std::shared_ptr<fe::graph::Graph>* graph, int64_t* workspace) {
  const char* name = backward ? "sdpa backward" : "sdpa forward";
  std::string why;
  try {
    *graph = backward ? BackwardGraph(s, 0) : ForwardGraph(s, 0);
    why = Build(name, **graph, handle);
    if (why.empty()) {
      if (auto e = (*graph)->get_workspace_size(*workspace); e.is_bad())
        why = Problem(name, "workspace", e);
    }
  } catch (const std::exception& e) {  // the frontend throws where it cannot describe the graph
    why = std::string(name) + ": cuDNN frontend: " + e.what();
  }
  if (why.empty() && backward && s.deterministic && *workspace > kMaxDeterministicWorkspace) {
    why = "sdpa backward: the deterministic algorithm needs " + std::to_string(*workspace >> 20) +
          " MiB of workspace (at most " + std::to_string(kMaxDeterministicWorkspace >> 20) + ")";
  }
  if (!why.empty()) graph->reset();
  return why;
}

Plans MakePlans(const SdpaShape& s, cudnnHandle_t handle) {
  Plans p;
  p.fwd_why = BuildDirection(false, s, handle, &p.fwd, &p.fwd_workspace);
  p.bwd_why = BuildDirection(true, s, handle, &p.bwd, &p.bwd_workspace);
  return p;
}

// The plans of `s` on this thread (built on first use; each direction says whether it runs), or
// null with *why (no cuDNN, no device).
const Plans* PlansFor(const SdpaShape& s, cudnnHandle_t* handle, std::string* why) {
  *handle = ThreadHandle(why);
  if (*handle == nullptr) return nullptr;
  int device = 0;
  if (cudaGetDevice(&device) != cudaSuccess) {
    cudaGetLastError();
    *why = "no current CUDA device";
    return nullptr;
  }
  thread_local std::map<PlanKey, Plans> cache;
  const PlanKey key{s.batch,  s.heads,  s.seq,           s.qk_dim, s.v_dim,
                    s.causal, Scale(s), s.deterministic, device};
  auto it = cache.find(key);
  if (it == cache.end()) it = cache.emplace(key, MakePlans(s, *handle)).first;
  return &it->second;
}

// Runs `graph` with the tensors of `pack` on `stream`, its workspace from the caching allocator
// (freed after the call: later work on the same stream may reuse it, never earlier work).
std::string Execute(const char* name, const fe::graph::Graph& graph, int64_t workspace_bytes,
                    std::unordered_map<int64_t, void*>& pack, cudnnHandle_t handle, void* stream) {
  if (fe::detail::set_stream(handle, static_cast<cudaStream_t>(stream)) != CUDNN_STATUS_SUCCESS)
    return std::string(name) + ": cudnnSetStream failed";
  Tensor workspace;
  if (workspace_bytes > 0) {
    RegisterCudaAllocator();
    try {
      workspace = Tensor::Empty({(workspace_bytes + 3) / 4}, DType::kF32, CurrentDevice());
    } catch (const std::bad_alloc&) {
      return std::string(name) + ": no device memory for its " +
             std::to_string(workspace_bytes >> 20) + " MiB of workspace";
    }
  }
  if (auto e = graph.execute(handle, pack, workspace.defined() ? workspace.raw() : nullptr);
      e.is_bad())
    return Problem(name, "execute", e);
  g_runs.fetch_add(1, std::memory_order_relaxed);
  return "";
}

// The forward's or the backward's graph of `s` on the buffers of `b` (by the graphs' uids).
std::string Run(bool backward, const SdpaShape& s, const SdpaBuffers& b, void* stream) {
  cudnnHandle_t handle = nullptr;
  std::string why;
  const Plans* p = PlansFor(s, &handle, &why);
  if (p == nullptr) return why;
  if (!(backward ? p->bwd_why : p->fwd_why).empty()) return backward ? p->bwd_why : p->fwd_why;
  std::unordered_map<int64_t, void*> pack = {
      {1, const_cast<void*>(b.q)}, {2, const_cast<void*>(b.k)}, {3, const_cast<void*>(b.v)}};
  if (!backward) {
    pack[4] = b.o;
    pack[5] = b.stats;
    return Execute("sdpa forward", *p->fwd, p->fwd_workspace, pack, handle, stream);
  }
  pack[4] = const_cast<void*>(static_cast<const void*>(b.o));
  pack[5] = const_cast<float*>(b.stats_in);
  pack[6] = const_cast<void*>(b.d_o);
  pack[7] = b.dq;
  pack[8] = b.dk;
  pack[9] = b.dv;
  return Execute("sdpa backward", *p->bwd, p->bwd_workspace, pack, handle, stream);
}

}  // namespace

int64_t SdpaRuns() { return g_runs.load(std::memory_order_relaxed); }

std::string SdpaForward(const SdpaShape& s, const SdpaBuffers& b, void* stream) {
  return Run(false, s, b, stream);
}
std::string SdpaBackward(const SdpaShape& s, const SdpaBuffers& b, void* stream) {
  return Run(true, s, b, stream);
}

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
  {
    const Plans p = MakePlans(s, handle);  // the plans go before their handle
    why = !p.fwd_why.empty() ? p.fwd_why : p.bwd_why;
  }
  fe::detail::destroy_handle(handle);
  return why;
}

}  // namespace moe::kernels::cuda::sm90a
