"""The device the PyTorch benchmarks run on (bench/ceilings_torch.py, bench/slice_torch.py): CUDA, or
the CPU when rehearsing (toy sizes; the figures mean nothing).

    torch, dev = torch_device.pick(rehearse_cpu)   # exits 77 (a skip) without PyTorch or CUDA
    seconds = torch_device.per_call(torch, fn, reps, dev == "cuda")     # mean over back-to-back calls
    seconds = torch_device.median_call(torch, fn, reps, dev == "cuda")  # median of calls timed apart
"""
import sys
import time


def pick(rehearse_cpu):
    try:
        import torch
    except ImportError:
        print("SKIPPED: PyTorch is not installed here")
        sys.exit(77)
    if not rehearse_cpu and not torch.cuda.is_available():
        print("SKIPPED: PyTorch sees no CUDA device")
        sys.exit(77)
    return torch, "cpu" if rehearse_cpu else "cuda"


def per_call(torch, fn, reps, cuda):
    """Seconds a call of fn takes, over `reps` calls after one: CUDA events on the GPU, else the clock."""
    fn()
    if cuda:
        torch.cuda.synchronize()
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        for _ in range(reps):
            fn()
        b.record()
        torch.cuda.synchronize()
        return a.elapsed_time(b) / 1e3 / reps
    t0 = time.perf_counter()
    for _ in range(reps):
        fn()
    return (time.perf_counter() - t0) / reps


def median_call(torch, fn, reps, cuda):
    """The median of `reps` calls after one, each timed by its own CUDA events (the clock on the CPU)."""
    fn()
    times = []
    for _ in range(reps):
        if cuda:
            a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            a.record()
            fn()
            b.record()
            b.synchronize()
            times.append(a.elapsed_time(b) / 1e3)
        else:
            t0 = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t0)
    times.sort()
    return times[len(times) // 2]
