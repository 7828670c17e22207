#!/usr/bin/env python3
"""PyTorch's ceilings on this card (tests/gpu/perf.sh): the bf16 GEMM and the FP8 GEMM
(torch._scaled_mm, e4m3 with per-tensor scales, bf16 out) at 8192^3 on random data, and the device's
copy bandwidth (a 1 GiB tensor copied; read + write counted). Each timed by CUDA events over
several calls after a warm-up; the best of 5 such runs.

    bench/ceilings_torch.py [--size 8192] [--rehearse-cpu]
--rehearse-cpu: small sizes on the CPU (tests the program; its figures mean nothing).
"""
import argparse
import sys

import torch_device  # bench/, beside this script


def timed(torch, fn, reps, cuda):
    """The best of 5 runs of `reps` calls."""
    return min(torch_device.per_call(torch, fn, reps, cuda) for _ in range(5))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=8192)
    ap.add_argument("--rehearse-cpu", action="store_true")
    a = ap.parse_args()
    if a.size < 16 or a.size % 16:
        ap.error(f"--size: a multiple of 16, at least 16, got {a.size}")
    torch, dev = torch_device.pick(a.rehearse_cpu)
    cuda = dev == "cuda"
    n = a.size if cuda else min(a.size, 256)
    x = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    w = torch.randn(n, n, device=dev, dtype=torch.bfloat16)
    t = timed(torch, lambda: x @ w, 10 if cuda else 1, cuda)
    print(f"RESULT torch_gemm_bf16_8192_tflops {2 * n ** 3 / t / 1e12:.1f}  ({n}^3, random data)")
    if not cuda:
        print("RESULT torch_gemm_fp8_8192_tflops skipped (CUDA only)")
    elif not hasattr(torch, "_scaled_mm") or not hasattr(torch, "float8_e4m3fn"):
        print("RESULT torch_gemm_fp8_8192_tflops unavailable (this PyTorch has no torch._scaled_mm)")
    else:
        xf, wf = x.to(torch.float8_e4m3fn), w.to(torch.float8_e4m3fn).t()  # B column-major
        one = torch.ones((), device=dev)
        try:
            t8 = timed(torch, lambda: torch._scaled_mm(xf, wf, scale_a=one, scale_b=one,
                                                       out_dtype=torch.bfloat16), 10, cuda)
            print(f"RESULT torch_gemm_fp8_8192_tflops {2 * n ** 3 / t8 / 1e12:.1f}  "
                  f"({t / t8:.2f}x bf16; e4m3, per-tensor scales, no quantisation counted)")
        except RuntimeError as e:
            print(f"RESULT torch_gemm_fp8_8192_tflops refused ({str(e).splitlines()[0][:120]})")
    elems = (1 << 28) if cuda else (1 << 22)  # 1 GiB (16 MiB rehearsing) of fp32
    src = torch.empty(elems, device=dev)
    dst = torch.empty_like(src)
    tc = timed(torch, lambda: dst.copy_(src), 10 if cuda else 2, cuda)
    print(f"RESULT torch_copy_gbps {2 * elems * 4 / tc / 1e9:.0f} GB/s  (a {elems * 4 >> 20} MiB copy, read + write)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
