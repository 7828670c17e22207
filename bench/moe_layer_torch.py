#!/usr/bin/env python3
"""The peer of moe-bench-gpu's MoE layer: the same DeepSeek-V3 MoE layer written in plain PyTorch.

Same sizes and the same work as the engine's layer (bench/gpu_bench.cc): sigmoid router scores in
fp32, selection on score + bias, group-limited top-k (group score = sum of its top two), weights
normalised over the chosen experts and scaled; tokens sorted by expert; per expert a bf16 SwiGLU
(w13 then w2); the weighted combine back; forward and backward through autograd. (It leaves out the
sequence-wise balance loss, which the engine's layer computes as well: a few microseconds.)

Then the same layer with its experts' GEMMs in FP8 (torch._scaled_mm, e4m3, row-wise scales along
each GEMM's reduction, experts padded to 16 rows, quantisation in every call): the peer of the
engine's FP8 layer, with its output's error against the bf16 layer's (tests/gpu/fp8_peer_test.py
checks its logic on the CPU).

Also times PyTorch's scaled_dot_product_attention, causal, forward + backward, at moe-bench-gpu's
attention shapes (S = 4096, batch 1, 128 heads, bf16; MLA's d_qk 192 / d_v 128 and MHA's 128 / 128),
on each of PyTorch's SDPA backends that takes the shape (cuDNN, flash, memory-efficient) and on its
default dispatch, reporting the fastest as the baseline and each one's time (flash needs d_qk = d_v,
so MLA's 192/128 would otherwise fall to the slower memory-efficient kernel; cuDNN's takes it on
Hopper), with the same FLOP count as the engine's: forward 2 * B*H*S^2/2 * (d_qk + d_v), backward
twice that (Megatron's convention). Every time is the median of its calls, each timed by CUDA
events.

Prints RESULT lines in moe-bench-gpu's format. Needs PyTorch with CUDA.
    bench/moe_layer_torch.py [--tokens 16384] [--iters 5] [--attn-seq 4096] [--attn-heads 128]
"""
import argparse
import sys

import torch_device  # bench/, beside this script


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--tokens", type=int, default=16384)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--ffn", type=int, default=2048)
    ap.add_argument("--experts", type=int, default=32)
    ap.add_argument("--top-k", type=int, default=8)
    ap.add_argument("--baseline", choices=["auto", "loop"], default="auto",
                    help="auto: torch._grouped_mm where this PyTorch has it, else the per-expert loop")
    ap.add_argument("--groups", type=int, default=8)
    ap.add_argument("--topk-groups", type=int, default=4)
    ap.add_argument("--iters", type=int, default=5)
    ap.add_argument("--attn-seq", type=int, default=4096)
    ap.add_argument("--attn-heads", type=int, default=128)
    args = ap.parse_args()
    try:
        import torch
        import torch.nn.functional as F
    except ImportError:
        print("SKIPPED: PyTorch is not installed here")
        return 77
    if not torch.cuda.is_available():
        print("SKIPPED: PyTorch sees no CUDA device")
        return 77

    dev, bf16 = "cuda", torch.bfloat16
    T, h, f, E, k = args.tokens, args.hidden, args.ffn, args.experts, args.top_k
    G, KG = args.groups, args.topk_groups
    if E % G != 0 or KG > G or k > E:
        print(f"bad sizes: experts {E}, groups {G}, topk_groups {KG}, top_k {k}", file=sys.stderr)
        return 2
    gen = torch.Generator(device=dev).manual_seed(0)
    router = (torch.randn(E, h, device=dev, generator=gen) * 0.006).to(bf16).requires_grad_()
    # A fair baseline: one weight tensor per expert (indexing one [E, ...] tensor per expert makes
    # autograd build and add an all-experts-sized zero gradient for every expert), or, where this
    # PyTorch has it, torch._grouped_mm over [E, ...] weights (one kernel for all experts).
    w13_all = (torch.randn(E, 2 * f, h, device=dev, generator=gen) * 0.006).to(bf16)
    w2_all = (torch.randn(E, h, f, device=dev, generator=gen) * 0.006).to(bf16)
    w13 = [w.clone().requires_grad_() for w in w13_all.unbind(0)]
    w2 = [w.clone().requires_grad_() for w in w2_all.unbind(0)]
    w13_g = w13_all.transpose(1, 2).contiguous().requires_grad_()  # [E, h, 2f]
    w2_g = w2_all.transpose(1, 2).contiguous().requires_grad_()    # [E, f, h]

    def experts_loop(xp, counts):
        outs = []
        for e, xe in enumerate(torch.split(xp, counts)):  # one gradient for all pieces
            gate, up = (xe @ w13[e].t()).chunk(2, dim=-1)
            outs.append((F.silu(gate) * up) @ w2[e].t())
        return torch.cat(outs)

    def experts_grouped(xp, counts):
        offs = torch.tensor(counts, device=dev).cumsum(0).to(torch.int32)
        gate, up = torch._grouped_mm(xp, w13_g, offs=offs).chunk(2, dim=-1)
        return torch._grouped_mm(F.silu(gate) * up, w2_g, offs=offs)

    experts, baseline = experts_loop, "per-expert loop, separate weight tensors"
    bias = torch.zeros(E, device=dev)
    x = (torch.rand(T, h, device=dev, generator=gen) * 2 - 1).to(bf16).requires_grad_()
    dy = ((torch.rand(T, h, device=dev, generator=gen) * 2 - 1) * 1e-3).to(bf16)

    def route(x):
        """DeepSeek-V3's routing: the chosen experts [T, k] and their weights (autograd through them)."""
        logits = (x @ router.t()).float()
        scores = logits.sigmoid()
        with torch.no_grad():
            sel = scores + bias
            top2 = sel.view(T, G, E // G).topk(2, dim=-1).values.sum(-1)
            keep = torch.zeros(T, G, dtype=torch.bool, device=dev)
            keep.scatter_(1, top2.topk(KG, dim=-1).indices, True)
            sel = sel.masked_fill(~keep.repeat_interleave(E // G, dim=1), float("-inf"))
            idx = sel.topk(k, dim=-1).indices
        w = scores.gather(1, idx)
        return idx, w / w.sum(-1, keepdim=True) * 2.5

    def layer(x):
        idx, w = route(x)
        flat = idx.reshape(-1)
        order = flat.argsort(stable=True)
        token = order // k
        counts = torch.bincount(flat, minlength=E).tolist()
        xp = x[token]
        yp = experts(xp, counts) * w.reshape(-1)[order].unsqueeze(1).to(bf16)
        return torch.zeros_like(x).index_add(0, token, yp)

    def step():
        for p in [router, w13_g, w2_g, x] + w13 + w2:
            p.grad = None
        layer(x).backward(dy)

    if hasattr(torch, "_grouped_mm") and args.baseline != "loop":
        try:
            experts = experts_grouped
            step()
            torch.cuda.synchronize()
            baseline = "torch._grouped_mm"
        except Exception as e:  # an older GPU or PyTorch build: the loop it is, and the row says why
            experts, baseline = experts_loop, f"per-expert loop, separate weight tensors (_grouped_mm: {str(e)[:80]})"
    best = torch_device.median_call(torch, step, args.iters, True)  # CUDA events, the median
    rows = T * k
    flops = 18.0 * rows * h * f + 6.0 * T * h * E
    print(f"RESULT torch_version {torch.__version__}")
    print(f"RESULT torch_baseline {baseline}")
    print(f"RESULT torch_moe_layer_ms {best * 1e3:.2f}")
    print(f"RESULT torch_moe_layer_tflops {flops / best / 1e12:.1f}")
    bench_fp8_layer(torch, F, route, x, dy, [router, x] + w13 + w2, layer, flops, best, args.iters)
    for name, dqk, dv in (("mla", 192, 128), ("mha", 128, 128)):
        bench_sdpa(torch, F, name, args.attn_seq, args.attn_heads, dqk, dv, max(args.iters, 10))
    return 0


def quant_rows(torch, t):
    """e4m3 of a 2-D tensor with one fp32 scale per row (its amax over 448): (values, scales [R, 1])."""
    amax = t.abs().amax(dim=1, keepdim=True).float().clamp(min=1e-12)
    scale = amax / 448.0
    return (t.float() / scale).to(torch.float8_e4m3fn), scale


def fp8_linear(torch):
    """y = x . w^T with its three GEMMs in e4m3 through torch._scaled_mm, row-wise scales along each
    GEMM's reduction (x and dy per token in Fprop and Dgrad, per channel over the tokens in Wgrad; w
    per output row in Fprop, per input column in Dgrad); bf16 out, fp32 accumulation. Quantisation
    runs inside every call, weights included (as the engine's layer does)."""
    bf16 = torch.bfloat16

    def mm(a, b):  # a [M, K] and b [N, K], both quantised along K: a . b^T
        aq, sa = quant_rows(torch, a)
        bq, sb = quant_rows(torch, b)
        return torch._scaled_mm(aq, bq.t(), scale_a=sa, scale_b=sb.reshape(1, -1), out_dtype=bf16)

    class Fp8Linear(torch.autograd.Function):
        @staticmethod
        def forward(ctx, x, w):
            ctx.save_for_backward(x, w)
            return mm(x, w)

        @staticmethod
        def backward(ctx, dy):
            x, w = ctx.saved_tensors
            dy = dy.contiguous()
            return mm(dy, w.t().contiguous()), mm(dy.t().contiguous(), x.t().contiguous())

    return Fp8Linear.apply


def padded_dispatch(torch, flat, tokens, experts, align=16):
    """The permutation with every expert's rows padded to a multiple of `align` (FP8 GEMMs need their
    reduction, the rows in Wgrad, a multiple of 16): (row of each sorted slot, token of each padded row
    (tokens: the zero row), the sorted order, padded counts)."""
    dev = flat.device
    order = flat.argsort(stable=True)
    counts = torch.bincount(flat, minlength=experts)
    padded = (counts + align - 1) // align * align
    starts = padded.cumsum(0) - padded
    firsts = counts.cumsum(0) - counts
    expert = flat[order]
    slot = torch.arange(flat.numel(), device=dev)
    dest = starts[expert] + slot - firsts[expert]
    token_of_row = torch.full((int(padded.sum()),), tokens, dtype=torch.long, device=dev)
    token_of_row[dest] = order // (flat.numel() // tokens)
    return dest, token_of_row, order, padded.tolist()


def bench_fp8_layer(torch, F, route, x, dy, params, layer_bf16, flops, t_bf16, iters):
    """The same MoE layer with its experts' GEMMs in FP8 (fp8_linear): its time, TFLOP/s (the bf16
    layer's FLOP count) and its output's error against the bf16 layer's, or n/a with the reason.
    params: [router, x] + the experts' w13 + their w2 (one tensor per expert, as the bf16 loop's)."""
    if not hasattr(torch, "float8_e4m3fn") or not hasattr(torch, "_scaled_mm"):
        print(f"RESULT torch_moe_layer_fp8_tflops n/a (PyTorch {torch.__version__} has no FP8 GEMM)")
        return
    linear = fp8_linear(torch)
    T, E = x.shape[0], (len(params) - 2) // 2
    w13, w2 = params[2:2 + E], params[2 + E:]

    def layer(x):
        idx, w = route(x)
        k = idx.shape[1]
        dest, token_of_row, order, padded = padded_dispatch(torch, idx.reshape(-1), T, E)
        xp = torch.cat([x, x.new_zeros(1, x.shape[1])])[token_of_row]
        outs = []
        # torch.split: one gradient for all the pieces in the backward (a slice per expert would
        # add an xp-sized zero gradient per expert)
        for e, xe in enumerate(torch.split(xp, padded)):
            if xe.shape[0] > 0:
                gate, up = linear(xe, w13[e]).chunk(2, dim=-1)
                outs.append(linear(F.silu(gate) * up, w2[e]))
        yp = torch.cat(outs)[dest] * w.reshape(-1)[order].unsqueeze(1).to(x.dtype)
        return torch.zeros_like(x).index_add(0, order // k, yp)

    def step():
        for p in params:
            p.grad = None
        layer(x).backward(dy)

    try:
        with torch.no_grad():
            ref, got = layer_bf16(x).float(), layer(x).float()
        err = ((got - ref).norm() / ref.norm()).item()
        best = torch_device.median_call(torch, step, iters, True)
    except (RuntimeError, ValueError) as e:  # this GPU or PyTorch build lacks the row-wise GEMM
        why = (str(e).splitlines() or [type(e).__name__])[0][:120]
        print(f"RESULT torch_moe_layer_fp8_tflops n/a ({why})")
        return
    print("RESULT torch_moe_layer_fp8_how torch._scaled_mm e4m3, row-wise scales (DeepSeek-V3 tiles "
          "are 1x128 and 128x128), a GEMM call per expert padded to 16 rows, quantisation in eager "
          "PyTorch in every call (fp32 temporaries, the backward's operands transposed in bf16)")
    print(f"RESULT torch_moe_layer_fp8_rel_err {err:.4f}  (its output against the bf16 layer's)")
    print(f"RESULT torch_moe_layer_fp8_ms {best * 1e3:.2f}")
    print(f"RESULT torch_moe_layer_fp8_tflops {flops / best / 1e12:.1f}  ({t_bf16 / best:.2f}x the bf16 layer)")


SDPA_BACKENDS = ("cudnn", "flash", "efficient", "default")


def sdpa_backend(torch, backend):
    """A context that allows only one of PyTorch's SDPA backends ("default": its own dispatch)."""
    import contextlib
    if backend == "default":
        return contextlib.nullcontext()
    try:
        from torch.nn.attention import SDPBackend, sdpa_kernel
        which = {"cudnn": "CUDNN_ATTENTION", "flash": "FLASH_ATTENTION", "efficient": "EFFICIENT_ATTENTION"}[backend]
        return sdpa_kernel([getattr(SDPBackend, which)])
    except (ImportError, AttributeError):  # PyTorch before 2.3 (no cuDNN backend to choose)
        if backend == "cudnn":
            raise RuntimeError("this PyTorch cannot select the cuDNN SDPA backend")
        return torch.backends.cuda.sdp_kernel(enable_flash=backend == "flash", enable_math=False,
                                              enable_mem_efficient=backend == "efficient")


def bench_sdpa(torch, F, name, S, H, dqk, dv, iters):
    """Causal SDPA forward + backward on token-major [S, H*d] tensors, as the engine lays them out,
    on every backend that takes the shape; the fastest is the baseline."""
    dev, bf16 = "cuda", torch.bfloat16

    def rand(d):
        return (torch.rand(1, S, H, d, device=dev) * 2 - 1).to(bf16).transpose(1, 2).requires_grad_()

    q, k, v = rand(dqk), rand(dqk), rand(dv)
    dout = (torch.rand(1, H, S, dv, device=dev) * 2 - 1).to(bf16)

    def attend():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True, scale=dqk ** -0.5)

    def timed(fn):
        return torch_device.median_call(torch, fn, iters, True)

    fwd_flops = H * S * S * (dqk + dv)
    times = {}
    for backend in SDPA_BACKENDS:
        def fwd():
            with sdpa_backend(torch, backend), torch.no_grad():
                attend()

        def fwd_bwd():
            for t in (q, k, v):
                t.grad = None
            with sdpa_backend(torch, backend):
                attend().backward(dout)
        try:
            times[backend] = (timed(fwd), timed(fwd_bwd))
        except RuntimeError as e:  # this backend does not take the shape (or this PyTorch lacks it)
            print(f"RESULT torch_sdpa_{name}_{backend}_ms n/a ({str(e).splitlines()[0][:120]})")
            continue
        print(f"RESULT torch_sdpa_{name}_{backend}_ms {times[backend][1] * 1e3:.3f}")
    if not times:
        print(f"RESULT torch_sdpa_{name}_ms n/a (no SDPA backend takes d_qk {dqk}, d_v {dv})")
        return
    best = min(times, key=lambda b: times[b][1])
    t_fwd, t_all = times[best]
    print(f"RESULT torch_sdpa_{name}_backend {best}")
    print(f"RESULT torch_sdpa_{name}_fwd_ms {t_fwd * 1e3:.3f}")
    print(f"RESULT torch_sdpa_{name}_fwd_tflops {fwd_flops / t_fwd / 1e12:.1f}")
    print(f"RESULT torch_sdpa_{name}_ms {t_all * 1e3:.3f}  (sdpa fwd+bwd S={S} H={H} d_qk={dqk} d_v={dv} bf16, {best})")
    # Megatron's convention (the backward twice the forward), as moe-bench-gpu's attention rows.
    print(f"RESULT torch_sdpa_{name}_tflops {3.0 * fwd_flops / t_all / 1e12:.1f}")


if __name__ == "__main__":
    sys.exit(main())
