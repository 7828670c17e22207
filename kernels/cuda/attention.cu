// Causal attention on the GPU: the entry points of kernels/attention.h. bf16 runs on cuDNN's fused
// SDPA where this build has it (the Hopper paths) and cuDNN takes the shape, else, and for f32, on
// our tiled tensor-core kernels of attention_kernels.cuh (design there): the reference and the
// fallback (MOE_ATTENTION=ours forces them). bf16 or f32 storage for q, k, v, out, dout and the
// gradients (one type for all), lse and the backward's D in f32; fp32 accumulation throughout.
#include <cstdint>
#include <cstdio>
#include <initializer_list>
#include <mutex>
#include <set>
#include <string>

#include "common/check.h"
#include "kernels/cuda/attention_kernels.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda_backend.h"
#include "kernels/fused_attention.h"
#include "kernels/kernel_state.h"
#include "kernels/kernel_types.h"

namespace moe::kernels::cuda {
namespace {

// A CUDA launch for attn::Forward / attn::Backward. A kernel that needs more than 48 KB of shared
// memory is allowed it first (a host-side call of about a microsecond, made each time so that it
// holds on whichever device is current).
struct CudaLaunch {
  template <typename... Params, typename... Args>
  void operator()(void (*kernel)(Params...), dim3 grid, dim3 block, size_t smem,
                  const Args&... args) const {
    if (grid.x == 0 || grid.y == 0) return;
    if (smem > 48 * 1024) {
      const cudaError_t e = cudaFuncSetAttribute(
          kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, static_cast<int>(smem));
      MOE_CHECK(e == cudaSuccess) << "attention: " << smem
                                  << " bytes of shared memory per block: " << cudaGetErrorString(e);
    }
    kernel<<<grid, block, smem, Stream()>>>(args...);
  }
};

struct Dims {
  int seq, heads, d_qk, d_v;
};

// Head sizes the kernels take; 16-byte rows for cp.async.
Dims CheckDims(const Tensor& q, const Tensor& v, int64_t batch, int64_t seq_len, int64_t heads,
               const char* op, std::initializer_list<const Tensor*> rows) {
  const int64_t d_qk = q.dim(1) / heads, d_v = v.dim(1) / heads;
  MOE_CHECK(d_qk > 0 && d_v > 0 && d_qk % 8 == 0 && d_v % 8 == 0 && d_qk <= 256 && d_v <= 256)
      << op << " on CUDA: head sizes must be multiples of 8 up to 256, got d_qk " << d_qk
      << " and d_v " << d_v;
  MOE_CHECK(seq_len < (int64_t{1} << 30) && batch * heads <= 65535)
      << op << " on CUDA: seq " << seq_len << ", batch*heads " << batch * heads
      << " (at most 65535)";
  for (const Tensor* t : rows) {
    MOE_CHECK(reinterpret_cast<uintptr_t>(t->raw()) % 16 == 0)
        << op << " on CUDA: tensor data must be 16-byte aligned (a view that starts mid-row?)";
  }
  return {static_cast<int>(seq_len), static_cast<int>(heads), static_cast<int>(d_qk),
          static_cast<int>(d_v)};
}

// cuDNN's fused SDPA for a bf16 call: true when it ran. A shape cuDNN does not take is said once
// (with cuDNN's reason) and runs on our kernels; cuDNN remembers the refusal, so it costs nothing
// after. The forward's statistics are the natural log-sum-exp, as our lse, so either backward
// reads either forward's.
bool RanOnCudnn(bool backward, DType dt, const Dims& d, int64_t batch, double scale,
                const sm90a::SdpaBuffers& b) {
#ifdef MOE_WITH_SM90A
  if (dt != DType::kBF16 || scale <= 0 || GetAttentionKernels() == AttentionKernels::kOurs)
    return false;
  sm90a::SdpaShape s;
  s.batch = batch;
  s.heads = d.heads;
  s.seq = d.seq;
  s.qk_dim = d.d_qk;
  s.v_dim = d.d_v;
  s.scale = static_cast<float>(scale);
  s.deterministic = DeterministicKernels();
  const std::string why =
      backward ? sm90a::SdpaBackward(s, b, Stream()) : sm90a::SdpaForward(s, b, Stream());
  if (why.empty()) return true;
  cudaGetLastError();  // a failed call may leave a non-sticky error: not our kernels' to report
  static std::mutex mu;
  static std::set<std::string> said;
  const std::string shape = std::string(backward ? "backward " : "forward ") +
                            std::to_string(batch) + "x" + std::to_string(d.seq) + "x" +
                            std::to_string(d.heads) + " heads " + std::to_string(d.d_qk) + "/" +
                            std::to_string(d.d_v);
  std::lock_guard<std::mutex> lock(mu);
  if (said.insert(shape).second) {
    std::fprintf(stderr, "attention %s: cuDNN's fused SDPA did not run it (%s): our kernels do\n",
                 shape.c_str(), why.c_str());
  }
  return false;
#else
  (void)backward, (void)dt, (void)d, (void)batch, (void)scale, (void)b;
  return false;
#endif
}

}  // namespace

void AttentionForward(const Tensor& q, const Tensor& k, const Tensor& v, int64_t batch,
                      int64_t seq_len, int64_t heads, double scale, const Tensor& out,
                      const Tensor& lse) {
  const char* op = "AttentionForward";
  CheckOnCuda({&q, &k, &v, &out, &lse}, op);
  CheckF32(lse, op, "lse");
  const DType dt = StorageType({&q, &k, &v, &out}, op);
  const Dims d = CheckDims(q, v, batch, seq_len, heads, op, {&q, &k, &v, &out});
  sm90a::SdpaBuffers b;
  b.q = q.raw();
  b.k = k.raw();
  b.v = v.raw();
  b.o = out.raw();
  b.stats = Ptr<float>(lse);
  if (batch * seq_len > 0 && !RanOnCudnn(false, dt, d, batch, scale, b)) {
    MOE_CUDA_TYPED(dt, T, {
      const attn::FwdArgs<T> a{Ptr<const T>(q), Ptr<const T>(k),
                               Ptr<const T>(v), Ptr<T>(out),
                               Ptr<float>(lse), d.seq,
                               d.heads,         d.d_qk,
                               d.d_v,           static_cast<float>(scale) * attn::kLog2e};
      attn::Forward(a, static_cast<int>(batch), CudaLaunch{});
    });
  }
  CheckLaunch(op);
}

void AttentionBackward(const Tensor& q, const Tensor& k, const Tensor& v, const Tensor& out,
                       const Tensor& dout, const Tensor& lse, int64_t batch, int64_t seq_len,
                       int64_t heads, double scale, const Tensor& dq, const Tensor& dk,
                       const Tensor& dv) {
  const char* op = "AttentionBackward";
  CheckOnCuda({&q, &k, &v, &out, &dout, &lse, &dq, &dk, &dv}, op);
  CheckF32(lse, op, "lse");
  const DType dt = StorageType({&q, &k, &v, &out, &dout, &dq, &dk, &dv}, op);
  const Dims d =
      CheckDims(q, v, batch, seq_len, heads, op, {&q, &k, &v, &out, &dout, &dq, &dk, &dv});
  sm90a::SdpaBuffers b;
  b.q = q.raw();
  b.k = k.raw();
  b.v = v.raw();
  b.o = out.raw();
  b.d_o = dout.raw();
  b.stats_in = Ptr<float>(lse);
  b.dq = dq.raw();
  b.dk = dk.raw();
  b.dv = dv.raw();
  if (batch * seq_len > 0 && !RanOnCudnn(true, dt, d, batch, scale, b)) {
    RegisterCudaAllocator();
    Tensor delta = Tensor::Empty({batch * heads * seq_len}, DType::kF32, q.device());
    MOE_CUDA_TYPED(dt, T, {
      const attn::BwdArgs<T> a{Ptr<const T>(q),
                               Ptr<const T>(k),
                               Ptr<const T>(v),
                               Ptr<const T>(dout),
                               Ptr<const float>(lse),
                               Ptr<const float>(delta),
                               Ptr<T>(dq),
                               Ptr<T>(dk),
                               Ptr<T>(dv),
                               d.seq,
                               d.heads,
                               d.d_qk,
                               d.d_v,
                               static_cast<float>(scale),
                               static_cast<float>(scale) * attn::kLog2e};
      attn::Backward(a, Ptr<const T>(out), Ptr<float>(delta), static_cast<int>(batch),
                     CudaLaunch{});
    });
  }
  CheckLaunch(op);
}

}  // namespace moe::kernels::cuda
