// Device dispatch of the latent decoding attention (kernels/latent_attention.h).
#include "kernels/latent_attention.h"

#include "kernels/dispatch.h"

namespace moe::kernels {

MOE_KERNEL_BACKENDS(LatentAttentionDecode)

void LatentAttentionDecode(const Tensor& q, const Tensor& cache, int64_t heads, int64_t dv,
                           double scale, const Tensor& out) {
  MOE_CHECK(q.ndim() == 2 && cache.ndim() == 2 && out.ndim() == 2 && heads > 0 &&
            q.dim(1) == heads * cache.dim(1) && cache.dim(0) >= q.dim(0) && dv > 0 &&
            dv <= cache.dim(1) && out.dim(0) == q.dim(0) && out.dim(1) == heads * dv &&
            q.dtype() == cache.dtype() && q.dtype() == out.dtype() &&
            q.device() == cache.device() && q.device() == out.device())
      << "LatentAttentionDecode: q " << q.ShapeString() << ", cache " << cache.ShapeString()
      << ", out " << out.ShapeString() << ", heads " << heads << ", dv " << dv;
  return MOE_DISPATCH(q, LatentAttentionDecode(q, cache, heads, dv, scale, out));
}

}  // namespace moe::kernels
