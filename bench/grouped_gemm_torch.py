#!/usr/bin/env python3
"""The peer of moe-bench-gpu's grouped GEMM rows: the experts' first GEMM (w13's shape, forward) in
PyTorch, the two ways a PyTorch user would write it.

Same sizes as the engine's rows (bench/gpu_bench.cc, "1b"): 32 experts, x [rows, 7168] bf16 against
each expert's w13 [4096, 7168] bf16 (y = x_e w13_e^T), at 128, 512 and 4,096 rows per expert and at a
skewed split of 512 a expert on average (expert e's share of the rows proportional to 1 / (e + 1),
what a learned router's imbalance looks like: 4,051 rows for the first expert, 126 for the last):
  - a loop of torch.mm, one call per expert, writing into its rows of one output;
  - torch._grouped_mm over the [E, 7168, 4096] weights with the experts' end offsets (one kernel),
    where this PyTorch has it (2.8 and later, on Hopper).
Each figure is the median of CUDA-event-timed calls, in TFLOP/s of 2·rows·4096·7168, the same count as
the engine's rows. Prints RESULT lines in moe-bench-gpu's format:
  RESULT torch_grouped_gemm_<128|512|4096|skewed>_rows_<loop|grouped_mm>_tflops <x>
--rehearse-cpu: toy sizes on the CPU (the rows per expert divided by 32, hidden and FFN by 16; the
figures mean nothing). Needs PyTorch; exits 77 (a skip) without it, or without CUDA unless rehearsing.

    bench/grouped_gemm_torch.py [--iters 10] [--rehearse-cpu]
"""
import argparse

import torch_device  # bench/, beside this script

EXPERTS, HIDDEN, FFN = 32, 7168, 2048


def skewed_counts(experts, total):
    """Rows per expert proportional to 1 / (e + 1), at least one each, summing to `total`; the
    remainder of the rounding to expert 0. bench/gpu_bench.cc's SkewedCounts is the same split."""
    harmonic = sum(1.0 / (e + 1) for e in range(experts))
    counts = [max(1, int(total / (e + 1) / harmonic)) for e in range(experts)]
    counts[0] += total - sum(counts)
    return counts


def splits(rehearse):
    scale = 32 if rehearse else 1
    out = [(str(per), [per // scale] * EXPERTS) for per in (128, 512, 4096)]
    out.append(("skewed", skewed_counts(EXPERTS, 512 * EXPERTS // scale)))
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--iters", type=int, default=10)
    ap.add_argument("--rehearse-cpu", action="store_true")
    args = ap.parse_args()
    torch, dev = torch_device.pick(args.rehearse_cpu)
    cuda = dev == "cuda"
    h, n = (HIDDEN // 16, 2 * FFN // 16) if args.rehearse_cpu else (HIDDEN, 2 * FFN)
    gen = torch.Generator(device=dev).manual_seed(0)
    w = ((torch.rand(EXPERTS, n, h, device=dev, generator=gen) * 2 - 1) * 0.02).to(torch.bfloat16)
    w_t = w.transpose(1, 2).contiguous()  # [E, h, n]: _grouped_mm's layout, made once
    grouped = hasattr(torch, "_grouped_mm")
    print(f"RESULT torch_grouped_gemm_version {torch.__version__} on {dev}"
          f"{'' if grouped else ' (no torch._grouped_mm in this PyTorch)'}")
    for label, counts in splits(args.rehearse_cpu):
        total = sum(counts)
        x = ((torch.rand(total, h, device=dev, generator=gen) * 2 - 1)).to(torch.bfloat16)
        y = torch.empty(total, n, device=dev, dtype=torch.bfloat16)
        flop = 2.0 * total * n * h

        def loop():
            start = 0
            for e, c in enumerate(counts):
                torch.mm(x[start:start + c], w[e].t(), out=y[start:start + c])
                start += c

        s = torch_device.median_call(torch, loop, args.iters, cuda)
        print(f"RESULT torch_grouped_gemm_{label}_rows_loop_tflops {flop / s / 1e12:.1f}  "
              f"({total} rows over {EXPERTS} experts, {min(counts)}-{max(counts)} each)")
        if not grouped:
            print(f"RESULT torch_grouped_gemm_{label}_rows_grouped_mm_tflops not in PyTorch {torch.__version__}")
            continue
        offs = torch.tensor(counts, device=dev).cumsum(0).to(torch.int32)
        try:
            s = torch_device.median_call(torch, lambda: torch._grouped_mm(x, w_t, offs=offs), args.iters, cuda)
            print(f"RESULT torch_grouped_gemm_{label}_rows_grouped_mm_tflops {flop / s / 1e12:.1f}")
        except Exception as e:  # an older card or build: the row says why
            why = (str(e).splitlines() or [type(e).__name__])[0][:100]
            print(f"RESULT torch_grouped_gemm_{label}_rows_grouped_mm_tflops failed: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
