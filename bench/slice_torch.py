#!/usr/bin/env python3
"""The DeepSeek-V3-width slice's training step in plain PyTorch: the peer moe-bench-slice is judged
against (tests/gpu/perf.sh, "slice step pytorch").

Written from DeepSeek-V3's published architecture, not from this project's engine: a dense layer
and N MoE layers at hidden 7168, each with multi-head latent attention (128 heads; q through a
1536-rank LoRA, keys and values through a 512-rank latent, 128 + 64 query/key dims with one shared
rotary key, 128 value dims; RMSNorm on both latents), the dense layer's SwiGLU of 18,432, the MoE
layers' sigmoid router (group-limited: 8 groups, the best 4 kept by the sum of their top two,
top-8 of 32 experts, weights normalised and scaled by 2.5) over 32 SwiGLU experts of 2,048 and
one shared expert; the head and cross-entropy over the vocabulary; AdamW. Mixed precision as a
PyTorch user runs it: fp32 weights and optimizer, bf16 autocast. The choices a user would make for
speed: the fastest SDPA backend that takes 192/128 (tried in turn), the faster of torch._grouped_mm
and a loop of torch.mm for the experts (timed first), the fused AdamW.

--routing forced draws the router's scores at random (balanced load, as every published MoE
throughput record runs); learned routes by the router. Each step is timed by CUDA events; the median
of the timed steps; TFLOP/s by Megatron's count (written out below from Megatron-LM's
num_floating_point_operations: 6 x the forward multiply-adds of every GEMM, causal attention half
the square, the router not counted), MFU against --measured-tflops (the engine's 8192^3 rate of
the same run) and --datasheet-tflops.

    bench/slice_torch.py [--moe-layers 1] [--vocab 129280] [--seq 4096] [--micro-batches 4]
                         [--steps 10] [--warmup 2] [--routing forced|learned] [--compile]
                         [--measured-tflops X] [--datasheet-tflops X] [--rehearse-cpu]
--rehearse-cpu: toy widths on the CPU (tests the program; its figures mean nothing).
"""
import argparse
import gc
import math
import statistics
import sys

import torch_device  # bench/, beside this script
import time


def parse():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--moe-layers", type=int, default=1)
    ap.add_argument("--vocab", type=int, default=129280)
    ap.add_argument("--seq", type=int, default=4096)
    ap.add_argument("--micro-batches", type=int, default=4)
    ap.add_argument("--steps", type=int, default=10)
    ap.add_argument("--warmup", type=int, default=2)
    ap.add_argument("--routing", choices=["forced", "learned"], default="forced")
    ap.add_argument("--compile", action="store_true", help="torch.compile each layer (minutes)")
    ap.add_argument("--measured-tflops", type=float, default=0.0)
    ap.add_argument("--datasheet-tflops", type=float, default=0.0)
    ap.add_argument("--rehearse-cpu", action="store_true")
    a = ap.parse_args()
    for name in ("moe_layers", "vocab", "seq", "micro_batches", "steps", "warmup"):
        if getattr(a, name) < 1:
            ap.error(f"--{name.replace('_', '-')}: at least 1, got {getattr(a, name)}")
    return a


class Shape:
    def __init__(self, a):
        toy = a.rehearse_cpu
        self.h = 64 if toy else 7168
        self.heads = 2 if toy else 128
        self.q_lora, self.kv_lora = (32, 16) if toy else (1536, 512)
        self.dn, self.dr, self.dv = 128, 64, 128
        self.dense_ffn = 96 if toy else 18432
        self.ffn, self.experts, self.top_k, self.groups, self.keep = (32 if toy else 2048), 32, 8, 8, 4
        self.vocab = min(a.vocab, 512) if toy else a.vocab
        self.seq = min(a.seq, 64) if toy else a.seq
        self.moe_layers, self.micro = a.moe_layers, a.micro_batches

    def megatron_flops(self):
        """One step's FLOPs by Megatron-LM's count (num_floating_point_operations)."""
        t = self.micro * self.seq
        h, H = self.h, self.heads
        layers = 1 + self.moe_layers
        proj = (self.q_lora * (h + H * (self.dn + self.dr) + 1) + self.kv_lora * (h + H * (self.dn + self.dv) + 1)
                + h * self.dr + H * self.dv * h)
        core = self.micro * self.seq * self.seq * (H * (self.dn + self.dr) / 2 + H * self.dv / 2)
        ffn = 3 * h * (self.dense_ffn + self.moe_layers * self.ffn * (self.top_k + 1))
        vocab = (self.vocab + 127) // 128 * 128
        return 6 * (t * layers * proj + core * layers + t * ffn + t * h * vocab)


def build(torch, s, dev):
    nn, F = torch.nn, torch.nn.functional

    class RMSNorm(nn.Module):
        def __init__(self, d):
            super().__init__()
            self.w = nn.Parameter(torch.ones(d, device=dev))

        def forward(self, x):
            return x * torch.rsqrt(x.float().pow(2).mean(-1, keepdim=True) + 1e-6).to(x.dtype) * self.w

    def lin(i, o):
        return nn.Linear(i, o, bias=False, device=dev)

    def rope(x, pos_cos, pos_sin):  # pairwise rotation of the last dim, in x's dtype
        pos_cos, pos_sin = pos_cos.to(x.dtype), pos_sin.to(x.dtype)
        x1, x2 = x[..., 0::2], x[..., 1::2]
        return torch.stack((x1 * pos_cos - x2 * pos_sin, x1 * pos_sin + x2 * pos_cos), -1).flatten(-2)

    class MLA(nn.Module):
        def __init__(self):
            super().__init__()
            self.q_a, self.q_norm = lin(s.h, s.q_lora), RMSNorm(s.q_lora)
            self.q_b = lin(s.q_lora, s.heads * (s.dn + s.dr))
            self.kv_a, self.kv_norm = lin(s.h, s.kv_lora + s.dr), RMSNorm(s.kv_lora)
            self.kv_b = lin(s.kv_lora, s.heads * (s.dn + s.dv))
            self.o = lin(s.heads * s.dv, s.h)
            inv = 1.0 / (10000 ** (torch.arange(0, s.dr, 2, device=dev).float() / s.dr))
            ang = torch.outer(torch.arange(s.seq, device=dev).float(), inv)
            self.register_buffer("cos", ang.cos(), persistent=False)
            self.register_buffer("sin", ang.sin(), persistent=False)

        def forward(self, x, sdpa):
            b, n, _ = x.shape
            q = self.q_b(self.q_norm(self.q_a(x))).view(b, n, s.heads, s.dn + s.dr)
            q_nope, q_rope = q.split([s.dn, s.dr], -1)
            kv = self.kv_a(x)
            latent, k_rope = kv.split([s.kv_lora, s.dr], -1)
            k_rope = rope(k_rope, self.cos[:n], self.sin[:n]).unsqueeze(2).expand(b, n, s.heads, s.dr)
            q = torch.cat((q_nope, rope(q_rope, self.cos[:n, None], self.sin[:n, None])), -1)
            k_nope, v = self.kv_b(self.kv_norm(latent)).view(b, n, s.heads, s.dn + s.dv).split([s.dn, s.dv], -1)
            k = torch.cat((k_nope, k_rope), -1)
            out = sdpa(q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2))
            return self.o(out.transpose(1, 2).reshape(b, n, s.heads * s.dv))

    class SwiGLU(nn.Module):
        def __init__(self, f):
            super().__init__()
            self.w13, self.w2 = lin(s.h, 2 * f), lin(f, s.h)

        def forward(self, x):
            g, u = self.w13(x).chunk(2, -1)
            return self.w2(F.silu(g) * u)

    class MoE(nn.Module):
        def __init__(self, forced, experts_fn):
            super().__init__()
            self.router = nn.Parameter(torch.randn(s.experts, s.h, device=dev) * 0.006)
            self.register_buffer("bias", torch.zeros(s.experts, device=dev))
            self.w13 = nn.Parameter(torch.randn(s.experts, 2 * s.ffn, s.h, device=dev) * 0.006)
            self.w2 = nn.Parameter(torch.randn(s.experts, s.h, s.ffn, device=dev) * 0.006)
            self.shared, self.forced, self.experts_fn = SwiGLU(s.ffn), forced, experts_fn

        def forward(self, x):
            b, n, h = x.shape
            xt = x.reshape(-1, h)
            logits = F.linear(xt.float(), self.router)
            if self.forced:  # the router ran; its scores give way to random ones
                logits = logits + (torch.rand_like(logits) * 2 - 1 - logits).detach()
            scores = logits.sigmoid()
            # The bias steers selection (aux-loss-free balancing; not updated here), not when forced.
            biased = (scores if self.forced else scores + self.bias).view(-1, s.groups, s.experts // s.groups)
            group = biased.topk(2, -1).values.sum(-1)
            keep = torch.zeros_like(group).scatter_(1, group.topk(s.keep, -1).indices, 1.0)
            masked = biased.masked_fill(keep.unsqueeze(-1) == 0, float("-inf")).flatten(1)
            idx = masked.topk(s.top_k, -1).indices
            w = scores.gather(1, idx)
            # The experts in bf16 whatever autocast left x in (torch._grouped_mm is not on autocast's
            # list, and its fast path wants bf16 operands).
            bf = torch.bfloat16
            w = (w / w.sum(-1, keepdim=True) * 2.5).to(bf)
            flat = idx.flatten()
            order = torch.sort(flat, stable=True).indices
            counts = torch.bincount(flat, minlength=s.experts)
            rows = xt[order // s.top_k].to(bf)
            y = self.experts_fn(rows, counts, self.w13.to(bf), self.w2.to(bf))
            y = y * w.flatten()[order].unsqueeze(-1)
            out = torch.zeros(xt.shape, dtype=bf, device=xt.device).index_add_(0, order // s.top_k, y)
            return (out + self.shared(xt)).view(b, n, h), counts

    class Layer(nn.Module):
        def __init__(self, moe, forced, experts_fn):
            super().__init__()
            self.n1, self.attn, self.n2 = RMSNorm(s.h), MLA(), RMSNorm(s.h)
            self.ffn = MoE(forced, experts_fn) if moe else SwiGLU(s.dense_ffn)

        def forward(self, x, sdpa):
            x = x + self.attn(self.n1(x), sdpa)
            f = self.ffn(self.n2(x))
            if isinstance(f, tuple):
                return x + f[0], f[1]
            return x + f, None

    class Model(nn.Module):
        def __init__(self, forced, experts_fn):
            super().__init__()
            self.emb = nn.Embedding(s.vocab, s.h, device=dev)
            self.layers = nn.ModuleList([Layer(i > 0, forced, experts_fn) for i in range(1 + s.moe_layers)])
            self.norm, self.head = RMSNorm(s.h), lin(s.h, s.vocab)

        def forward(self, tokens, targets, sdpa):
            x, loads = self.emb(tokens), []
            for layer in self.layers:
                x, c = layer(x, sdpa)
                if c is not None:
                    loads.append(c)
            logits = self.head(self.norm(x))
            return F.cross_entropy(logits.float().view(-1, s.vocab), targets.view(-1)), loads

    return Model


def experts_loop(torch):
    F = torch.nn.functional

    def run(rows, counts, w13, w2):
        outs, at = [], 0
        for e, c in enumerate(counts.tolist()):
            g, u = torch.mm(rows[at:at + c], w13[e].t()).chunk(2, -1)
            outs.append(torch.mm(F.silu(g) * u, w2[e].t()))
            at += c
        return torch.cat(outs)
    return run


def experts_grouped(torch):
    F = torch.nn.functional

    def run(rows, counts, w13, w2):
        offs = counts.cumsum(0).to(torch.int32)
        g, u = torch._grouped_mm(rows, w13.transpose(1, 2), offs=offs).chunk(2, -1)
        return torch._grouped_mm(F.silu(g) * u, w2.transpose(1, 2), offs=offs)
    return run


def pick_sdpa(torch, s, dev, cuda):
    """The fastest SDPA backend that takes q/k of 192 and v of 128, causal, forward + backward."""
    F = torch.nn.functional
    q = torch.randn(1, s.heads, s.seq, s.dn + s.dr, device=dev, dtype=torch.bfloat16, requires_grad=True)
    k = torch.randn_like(q, requires_grad=True)
    v = torch.randn(1, s.heads, s.seq, s.dv, device=dev, dtype=torch.bfloat16, requires_grad=True)
    best, how = None, "default dispatch"
    if not hasattr(F, "scaled_dot_product_attention"):  # PyTorch before 2.0 (Debian 12's, rehearsing)
        def manual(a, b, c):
            n = a.shape[-2]
            mask = torch.ones(n, n, dtype=torch.bool, device=a.device).triu(1)
            att = (a @ b.transpose(-1, -2)) / math.sqrt(a.shape[-1])
            return att.masked_fill(mask, float("-inf")).softmax(-1).to(c.dtype) @ c
        return manual, "written out (this PyTorch has no SDPA)"
    if not cuda:
        return (lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True)), how
    from torch.nn.attention import SDPBackend, sdpa_kernel
    cands = [(n, getattr(SDPBackend, n)) for n in ("CUDNN_ATTENTION", "FLASH_ATTENTION", "EFFICIENT_ATTENTION")
             if hasattr(SDPBackend, n)]
    for name, backend in cands:
        def fb(backend=backend):
            with sdpa_kernel(backend):
                F.scaled_dot_product_attention(q, k, v, is_causal=True).sum().backward()
        try:
            t = torch_device.per_call(torch, fb, 3, cuda)
        except RuntimeError:
            continue  # this backend does not take the shape
        if best is None or t < best[0]:
            best = (t, backend, name)
    if best is None:
        return (lambda a, b, c: F.scaled_dot_product_attention(a, b, c, is_causal=True)), how

    def sdpa(a, b, c, backend=best[1]):
        with sdpa_kernel(backend):
            return F.scaled_dot_product_attention(a, b, c, is_causal=True)
    return sdpa, best[2].lower()


def measure(torch, a, s, dev, sdpa, experts):
    """The timed steps' seconds and expert imbalance (max over mean tokens, worst layer)."""
    cuda = dev == "cuda"
    model = build(torch, s, dev)(a.routing == "forced", experts)
    if a.compile:
        for layer in model.layers:
            layer.compile()
    opt = torch.optim.AdamW(model.parameters(), lr=1e-4, betas=(0.9, 0.95), weight_decay=0.1,
                            **({"fused": True} if cuda else {}))
    tokens = torch.randint(0, s.vocab, (a.micro_batches, 1, s.seq), device=dev)

    def step():
        opt.zero_grad(set_to_none=True)
        for m in range(a.micro_batches):
            with torch.autocast(dev, dtype=torch.bfloat16):
                loss, loads = model(tokens[m], tokens[m].roll(-1, -1), sdpa)
            (loss / a.micro_batches).backward()
        opt.step()
        return loads

    times, imbalance = [], []
    for i in range(a.warmup + a.steps):
        if cuda:
            e0, e1 = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            e0.record()
        t0 = time.perf_counter()
        loads = step()
        if cuda:
            e1.record()
            torch.cuda.synchronize()
        t = e0.elapsed_time(e1) / 1e3 if cuda else time.perf_counter() - t0
        if i >= a.warmup:
            times.append(t)
            imbalance.append(max(float(c.max()) * s.experts / float(c.sum()) for c in loads))
    return times, imbalance


def main():
    a = parse()
    torch, dev = torch_device.pick(a.rehearse_cpu)
    cuda = dev == "cuda"
    torch.manual_seed(0)
    s = Shape(a)
    if not cuda:
        a.steps, a.warmup = min(a.steps, 2), 1
    sdpa, sdpa_how = pick_sdpa(torch, s, dev, cuda)
    # The experts: torch._grouped_mm where this PyTorch has it (and it wins), else the loop.
    experts, experts_how = experts_loop(torch), "a loop of torch.mm"
    if cuda and hasattr(torch, "_grouped_mm"):
        r = torch.randn(4096 * 8, s.h, device=dev, dtype=torch.bfloat16)
        c = torch.full((s.experts,), 4096 * 8 // s.experts, device=dev)
        w13 = torch.randn(s.experts, 2 * s.ffn, s.h, device=dev, dtype=torch.bfloat16)
        w2 = torch.randn(s.experts, s.h, s.ffn, device=dev, dtype=torch.bfloat16)
        try:
            tg = torch_device.per_call(torch, lambda: experts_grouped(torch)(r, c, w13, w2), 3, cuda)
            tl = torch_device.per_call(torch, lambda: experts_loop(torch)(r, c, w13, w2), 3, cuda)
            if tg < tl:
                experts, experts_how = experts_grouped(torch), "torch._grouped_mm"
        except RuntimeError as e:
            print(f"torch._grouped_mm refused: {e}", file=sys.stderr)
        del r, w13, w2
    engine = (1 + s.moe_layers, s.vocab)
    while True:  # PyTorch's fp32 AdamW holds more a parameter than the engine's bf16 moments
        oom = False
        try:
            times, imbalance = measure(torch, a, s, dev, sdpa, experts)
        except RuntimeError as e:
            if "out of memory" not in str(e) or (s.moe_layers == 1 and s.vocab <= 32768):
                raise
            oom = True
        if not oom:
            break
        gc.collect()
        torch.cuda.empty_cache()
        print(f"out of memory at {1 + s.moe_layers} layers, vocabulary {s.vocab}: one size smaller",
              file=sys.stderr)
        if s.moe_layers > 1:
            s.moe_layers -= 1
        else:
            s.vocab = 32768
    step_s = statistics.median(times)
    tflops = s.megatron_flops() / step_s / 1e12
    layout = f"{1 + s.moe_layers} layers, vocabulary {s.vocab}"
    if (1 + s.moe_layers, s.vocab) != engine:
        layout += f" (the engine's {engine[0]} layers, vocabulary {engine[1]}, did not fit PyTorch's fp32 AdamW)"
    how = (f"SDPA {sdpa_how}, experts by {experts_how}, fp32 weights with bf16 autocast, "
           f"{'fused ' if cuda else ''}AdamW{', torch.compile' if a.compile else ''}; {layout}")
    print(f"RESULT torch_slice_how {how}")
    print(f"RESULT torch_slice_step_ms {step_s * 1e3:.2f}  (median of {len(times)} steps, {a.routing} routing)")
    print(f"RESULT torch_slice_tflops {tflops:.1f}  (Megatron's count)")
    if a.measured_tflops > 0:
        print(f"RESULT torch_slice_mfu_measured {tflops / a.measured_tflops:.3f}")
    if a.datasheet_tflops > 0:
        print(f"RESULT torch_slice_mfu_datasheet {tflops / a.datasheet_tflops:.3f}")
    print(f"RESULT torch_slice_expert_imbalance {statistics.median(imbalance):.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
