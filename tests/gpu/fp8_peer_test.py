#!/usr/bin/env python3
"""The logic of the FP8 MoE layer that perf.sh's PyTorch peer times (bench/moe_layer_torch.py,
bench_fp8_layer), on the CPU: with e4m3 standing in as fp32 and torch._scaled_mm as a dequantised
fp32 product (which checks its operands' layout, scale shapes and 16-multiples as the real one
requires), the layer must be the plain MoE layer, forward and every gradient (router, input, each
expert's weights): the padded permutation, the three GEMMs of its autograd function and the combine.
The FP8 arithmetic itself runs only on a GPU (this PyTorch may have no float8 at all)."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "bench"))
try:
    import torch
    import torch.nn.functional as F
except ImportError:
    print("FAIL: /usr/bin/python3 lacks torch (scripts/install-deps.sh test installs python3-torch)")
    sys.exit(1)
import moe_layer_torch  # noqa: E402  (bench/, by the path above)


def scaled_mm(a, b, scale_a, scale_b, out_dtype):
    assert a.shape[0] % 16 == 0 and a.shape[1] % 16 == 0 and b.shape[1] % 16 == 0, (a.shape, b.shape)
    assert b.stride(0) == 1, "mat2 must be column-major"
    assert scale_a.shape == (a.shape[0], 1) and scale_b.shape == (1, b.shape[1]), (scale_a.shape, scale_b.shape)
    assert out_dtype == torch.bfloat16
    return (a.float() * scale_a) @ (b.float() * scale_b)  # fp32: the logic, not the rounding


def main():
    torch.float8_e4m3fn = torch.float32
    torch._scaled_mm = scaled_mm
    T, h, f, E, k = 37, 32, 16, 6, 3  # 37 tokens: every expert's rows need padding
    g = torch.Generator().manual_seed(0)
    router = torch.randn(E, h, generator=g).requires_grad_()
    w13 = [torch.randn(2 * f, h, generator=g).requires_grad_() for _ in range(E)]
    w2 = [torch.randn(h, f, generator=g).requires_grad_() for _ in range(E)]
    x = torch.randn(T, h, generator=g).requires_grad_()
    dy = torch.randn(T, h, generator=g)
    params = [router, x] + w13 + w2

    def route(x):
        s = (x @ router.t()).sigmoid()
        idx = s.topk(k, dim=-1).indices
        w = s.gather(1, idx)
        return idx, w / w.sum(-1, keepdim=True)

    def layer(x):  # the plain layer: tokens sorted by expert, no padding
        idx, w = route(x)
        flat = idx.reshape(-1)
        order = flat.argsort()
        xp, outs, start = x[order // k], [], 0
        for e, c in enumerate(torch.bincount(flat, minlength=E).tolist()):
            gate, up = (xp[start:start + c] @ w13[e].t()).chunk(2, dim=-1)
            outs.append((F.silu(gate) * up) @ w2[e].t())
            start += c
        yp = torch.cat(outs) * w.reshape(-1)[order].unsqueeze(1)
        return torch.zeros_like(x).index_add(0, order // k, yp)

    layer(x).backward(dy)
    want = [p.grad.clone() for p in params]
    got = {}

    def one_step(torch_, fn, reps, cuda):  # median_call's stand-in: one step, its gradients kept
        for p in params:
            p.grad = None
        fn()
        got["grads"] = [p.grad.clone() for p in params]
        return 1.0

    moe_layer_torch.torch_device.median_call = one_step
    moe_layer_torch.bench_fp8_layer(torch, F, route, x, dy, params, layer, 1.0, 1.0, 1)
    names = ["router", "x"] + [f"w13[{e}]" for e in range(E)] + [f"w2[{e}]" for e in range(E)]
    failed = 0
    for name, a, b in zip(names, got["grads"], want):
        err = ((a - b).abs().max() / b.abs().max().clamp(min=1e-30)).item()
        ok = err < 1e-5
        failed += not ok
        print(f"  d{name:<8} relative error {err:.2e} {'ok' if ok else 'FAIL'}")
    print(f"{'PASS' if failed == 0 else 'FAIL'}: {failed} of {len(names)} gradients off")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
