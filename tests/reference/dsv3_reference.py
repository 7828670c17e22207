"""An independent plain-PyTorch DeepSeek-V3 (MLA, MoE with biased group-limited routing, MTP),
written from docs/reference/deepseek-v3-architecture.md, flops-and-models.md
("DeepSeek-V3 routing, exactly") and the public DeepSeek-V3 paper. A test oracle: slow, CPU,
float64 or float32, autograd for the backward. It shares no code with the C++ engine.

Everything is functional over a {HF tensor name: tensor} dict, so gradcheck can differentiate with
respect to any subset of the weights.

Conventions chosen where the sources leave room (see README.md beside this file):
- ties in every top-k (groups and experts, and the balance loss's top-k) go to the lower index;
- the YaRN decision (seq length > original_max_position_embeddings) uses the run's S for every
  block, the MTP blocks included; rotary angles are computed in float64 and then cast;
- routing rows are token-major within a sequence, sequences in batch order: row = b * S_layer + i;
- MTP layers use their own embed_tokens / shared_head.head copies when the checkpoint has them
  (mtp_tables="own"), else the main model's; mtp_tables="main" always uses the main model's.
"""

import json
import math
import os

import torch
import torch.nn.functional as F

import safetensors_io


class ConfigError(ValueError):
    """A config.json field is missing or inconsistent."""


_REQUIRED = ["vocab_size", "hidden_size", "intermediate_size", "moe_intermediate_size",
             "num_hidden_layers", "num_attention_heads", "n_routed_experts", "n_shared_experts",
             "num_experts_per_tok", "n_group", "topk_group", "routed_scaling_factor",
             "scoring_func", "norm_topk_prob", "first_k_dense_replace", "kv_lora_rank",
             "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim", "rope_theta", "rms_norm_eps"]
_YARN_KEYS = ["factor", "original_max_position_embeddings", "beta_fast", "beta_slow",
              "mscale_all_dim"]


class Config:
    """The HF DeepseekV3 config.json fields the model uses, validated."""

    def __init__(self, raw):
        if raw.get("model_type", "deepseek_v3") != "deepseek_v3":
            raise ConfigError(f"config.json: model_type is {raw.get('model_type')!r}, "
                              "expected 'deepseek_v3'")
        missing = [k for k in _REQUIRED if k not in raw or raw[k] is None]
        if missing:
            raise ConfigError(f"config.json: missing required field(s) {missing}")
        self.raw = dict(raw)
        for k in _REQUIRED:
            setattr(self, k, raw[k])
        self.q_lora_rank = raw.get("q_lora_rank") or None  # null or 0: one q_proj
        self.num_nextn_predict_layers = int(raw.get("num_nextn_predict_layers") or 0)
        self.rope_scaling = raw.get("rope_scaling")
        self._validate()

    def _validate(self):
        def need(cond, field, why):
            if not cond:
                raise ConfigError(f"config.json: {field} {why}")
        for k in ["vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                  "kv_lora_rank", "qk_nope_head_dim", "qk_rope_head_dim", "v_head_dim"]:
            need(isinstance(getattr(self, k), int) and getattr(self, k) > 0, k,
                 "must be a positive integer")
        need(self.qk_rope_head_dim % 2 == 0, "qk_rope_head_dim", "must be even (pairwise RoPE)")
        need(self.scoring_func in ("sigmoid", "softmax"), "scoring_func",
             f"is {self.scoring_func!r}; expected 'sigmoid' or 'softmax'")
        need(0 <= self.first_k_dense_replace, "first_k_dense_replace", "must be >= 0")
        kvh = self.raw.get("num_key_value_heads", self.num_attention_heads)
        need(kvh == self.num_attention_heads, "num_key_value_heads",
             "must equal num_attention_heads (MLA)")
        if self.has_moe_layers():
            e, g = self.n_routed_experts, self.n_group
            need(e > 0 and g > 0 and e % g == 0, "n_group",
                 f"({g}) must divide n_routed_experts ({e})")
            need(1 <= self.topk_group <= g, "topk_group",
                 f"({self.topk_group}) must be in 1..n_group")
            need(1 <= self.num_experts_per_tok <= self.topk_group * (e // g), "num_experts_per_tok",
                 "must be between 1 and topk_group * experts per group")
        if self.rope_scaling is not None:
            kind = self.rope_scaling.get("type", self.rope_scaling.get("rope_type"))
            need(kind == "yarn", "rope_scaling.type", f"is {kind!r}; only 'yarn' is supported")
            absent = [k for k in _YARN_KEYS if k not in self.rope_scaling]
            need(not absent, "rope_scaling", f"lacks {absent}")

    @property
    def qk_head_dim(self):
        return self.qk_nope_head_dim + self.qk_rope_head_dim

    def is_moe(self, layer):
        """Main layers: MoE from first_k_dense_replace on; MTP blocks: MoE iff the last main is."""
        if layer >= self.num_hidden_layers:
            layer = self.num_hidden_layers - 1
        return layer >= self.first_k_dense_replace

    def has_moe_layers(self):
        return self.first_k_dense_replace < self.num_hidden_layers

    def moe_layers(self):
        n = self.num_hidden_layers + self.num_nextn_predict_layers
        return [L for L in range(n) if self.is_moe(L)]

    def yarn_active(self, seq_len):
        rs = self.rope_scaling
        return rs is not None and seq_len > rs["original_max_position_embeddings"]


def load_config(directory):
    path = os.path.join(directory, "config.json")
    with open(path) as f:
        return Config(json.load(f))


# ----------------------------------------------------------------------------------------------
# Weight names and shapes (the released layout, [out, in] for every linear)

def _mlp_shapes(prefix, h, inter):
    return {f"{prefix}.gate_proj.weight": (inter, h), f"{prefix}.up_proj.weight": (inter, h),
            f"{prefix}.down_proj.weight": (h, inter)}


def _layer_shapes(cfg, L):
    h, n, p = cfg.hidden_size, cfg.num_attention_heads, f"model.layers.{L}"
    s = {f"{p}.input_layernorm.weight": (h,), f"{p}.post_attention_layernorm.weight": (h,)}
    a = f"{p}.self_attn"
    if cfg.q_lora_rank:
        s[f"{a}.q_a_proj.weight"] = (cfg.q_lora_rank, h)
        s[f"{a}.q_a_layernorm.weight"] = (cfg.q_lora_rank,)
        s[f"{a}.q_b_proj.weight"] = (n * cfg.qk_head_dim, cfg.q_lora_rank)
    else:
        s[f"{a}.q_proj.weight"] = (n * cfg.qk_head_dim, h)
    s[f"{a}.kv_a_proj_with_mqa.weight"] = (cfg.kv_lora_rank + cfg.qk_rope_head_dim, h)
    s[f"{a}.kv_a_layernorm.weight"] = (cfg.kv_lora_rank,)
    s[f"{a}.kv_b_proj.weight"] = (n * (cfg.qk_nope_head_dim + cfg.v_head_dim), cfg.kv_lora_rank)
    s[f"{a}.o_proj.weight"] = (h, n * cfg.v_head_dim)
    if not cfg.is_moe(L):
        s.update(_mlp_shapes(f"{p}.mlp", h, cfg.intermediate_size))
        return s
    s[f"{p}.mlp.gate.weight"] = (cfg.n_routed_experts, h)
    for j in range(cfg.n_routed_experts):
        s.update(_mlp_shapes(f"{p}.mlp.experts.{j}", h, cfg.moe_intermediate_size))
    if cfg.n_shared_experts:
        s.update(_mlp_shapes(f"{p}.mlp.shared_experts", h,
                             cfg.n_shared_experts * cfg.moe_intermediate_size))
    return s


def weight_shapes(cfg):
    """{name: shape} of every required weight (no bias, no optional MTP table copies)."""
    h, V = cfg.hidden_size, cfg.vocab_size
    s = {"model.embed_tokens.weight": (V, h), "model.norm.weight": (h,), "lm_head.weight": (V, h)}
    for L in range(cfg.num_hidden_layers + cfg.num_nextn_predict_layers):
        s.update(_layer_shapes(cfg, L))
        if L >= cfg.num_hidden_layers:
            p = f"model.layers.{L}"
            s.update({f"{p}.enorm.weight": (h,), f"{p}.hnorm.weight": (h,),
                      f"{p}.eh_proj.weight": (h, 2 * h), f"{p}.shared_head.norm.weight": (h,)})
    return s


def optional_shapes(cfg):
    """{name: shape} of the tensors a checkpoint may carry or not."""
    h, V, s = cfg.hidden_size, cfg.vocab_size, {}
    for L in cfg.moe_layers():
        s[f"model.layers.{L}.mlp.gate.e_score_correction_bias"] = (cfg.n_routed_experts,)
    for L in range(cfg.num_hidden_layers, cfg.num_hidden_layers + cfg.num_nextn_predict_layers):
        s[f"model.layers.{L}.embed_tokens.weight"] = (V, h)
        s[f"model.layers.{L}.shared_head.head.weight"] = (V, h)
    return s


def check_weights(cfg, weights):
    """Raises a ValueError naming every missing, unexpected or misshaped tensor."""
    required, optional = weight_shapes(cfg), optional_shapes(cfg)
    problems = [f"missing tensor {n} {list(sh)}" for n, sh in required.items() if n not in weights]
    for n, t in weights.items():
        want = required.get(n, optional.get(n))
        if want is None:
            problems.append(f"unexpected tensor {n} (not in the layout for this config)")
        elif tuple(t.shape) != tuple(want):
            problems.append(f"tensor {n} has shape {list(t.shape)}, expected {list(want)}")
    if problems:
        shown = problems[:20] + ([f"... {len(problems) - 20} more"] if len(problems) > 20 else [])
        raise ValueError("weights do not match config.json:\n  " + "\n  ".join(shown))


def is_trainable(name):
    return not name.endswith("e_score_correction_bias")


# ----------------------------------------------------------------------------------------------
# Building blocks

def rms_norm(x, w, eps):
    return x / torch.sqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def linear(x, w):
    return x @ w.t()


def swiglu(x, weights, prefix):
    g = linear(x, weights[f"{prefix}.gate_proj.weight"])
    u = linear(x, weights[f"{prefix}.up_proj.weight"])
    return linear(F.silu(g) * u, weights[f"{prefix}.down_proj.weight"])


def yarn_low_high(cfg):
    rs, d = cfg.rope_scaling, cfg.qk_rope_head_dim
    L0, theta = rs["original_max_position_embeddings"], cfg.rope_theta

    def dims_for(r):
        return d * math.log(L0 / (2 * math.pi * r)) / (2 * math.log(theta))
    low = max(math.floor(dims_for(rs["beta_fast"])), 0)
    high = min(math.ceil(dims_for(rs["beta_slow"])), d - 1)
    return low, high


def rope_frequencies(cfg, seq_len):
    """float64 [d_r/2] angular frequencies θ^(−2j/d_r), YaRN-corrected when active."""
    d = cfg.qk_rope_head_dim
    j = torch.arange(d // 2, dtype=torch.float64)
    freqs = 1.0 / (float(cfg.rope_theta) ** (2.0 * j / d))
    if cfg.yarn_active(seq_len):
        low, high = yarn_low_high(cfg)
        if low == high:
            high += 0.001
        ramp = ((j - low) / (high - low)).clamp(0.0, 1.0)
        smooth = 1.0 - ramp
        freqs = freqs * (smooth + (1.0 - smooth) / cfg.rope_scaling["factor"])
    return freqs


def softmax_scale(cfg, seq_len):
    scale = cfg.qk_head_dim ** -0.5
    if cfg.yarn_active(seq_len):
        rs = cfg.rope_scaling
        mscale = 0.1 * rs["mscale_all_dim"] * math.log(rs["factor"]) + 1.0
        scale = scale * mscale * mscale
    return scale


def rope_tables(cfg, run_len, positions, dtype):
    """cos, sin [positions, d_r/2] for positions 0 … positions−1 of a run of length run_len."""
    pos = torch.arange(positions, dtype=torch.float64)
    angles = torch.outer(pos, rope_frequencies(cfg, run_len))
    return torch.cos(angles).to(dtype), torch.sin(angles).to(dtype)


def apply_rope(x, cos, sin):
    """Rotates adjacent pairs (0,1), (2,3), … of the last dim.
    x [..., S, d_r]; cos, sin [S, d_r/2]."""
    x0, x1 = x[..., 0::2], x[..., 1::2]
    y0 = x0 * cos - x1 * sin
    y1 = x0 * sin + x1 * cos
    return torch.stack([y0, y1], dim=-1).flatten(-2)


# ----------------------------------------------------------------------------------------------
# Multi-head latent attention

def mla(cfg, weights, prefix, x, cos, sin, scale):
    B, S, _ = x.shape
    n, dn, dr, dv = (cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim,
                     cfg.v_head_dim)
    eps = cfg.rms_norm_eps
    if cfg.q_lora_rank:
        cq = rms_norm(linear(x, weights[f"{prefix}.q_a_proj.weight"]),
                      weights[f"{prefix}.q_a_layernorm.weight"], eps)
        q = linear(cq, weights[f"{prefix}.q_b_proj.weight"])
    else:
        q = linear(x, weights[f"{prefix}.q_proj.weight"])
    q = q.view(B, S, n, dn + dr).transpose(1, 2)                      # [B, n, S, d_qk]
    q_nope, q_rope = q[..., :dn], apply_rope(q[..., dn:], cos, sin)
    a = linear(x, weights[f"{prefix}.kv_a_proj_with_mqa.weight"])     # [B, S, r_kv + d_r]
    c_kv = rms_norm(a[..., :cfg.kv_lora_rank], weights[f"{prefix}.kv_a_layernorm.weight"], eps)
    k_rope = apply_rope(a[..., cfg.kv_lora_rank:], cos, sin)          # [B, S, d_r], shared
    kv = linear(c_kv, weights[f"{prefix}.kv_b_proj.weight"]).view(B, S, n, dn + dv).transpose(1, 2)
    k_nope, v = kv[..., :dn], kv[..., dn:]
    logits = (q_nope @ k_nope.transpose(-1, -2) + q_rope @ k_rope.unsqueeze(1).transpose(-1, -2))
    logits = logits * scale
    causal = torch.ones(S, S, dtype=torch.bool).triu(1)
    logits = logits.masked_fill(causal, float("-inf"))
    o = torch.softmax(logits, dim=-1) @ v                             # [B, n, S, d_v]
    o = o.transpose(1, 2).reshape(B, S, n * dv)
    return linear(o, weights[f"{prefix}.o_proj.weight"])


# ----------------------------------------------------------------------------------------------
# Routing and the MoE layer

def stable_topk(values, k):
    """Indices of the k largest along the last dim, descending, ties to the lower index."""
    return torch.sort(values, dim=-1, descending=True, stable=True)[1][..., :k]


def router_scores(cfg, logits):
    if cfg.scoring_func == "sigmoid":
        return torch.sigmoid(logits)
    return torch.softmax(logits, dim=-1)


def select_experts(cfg, scores, bias):
    """Chosen expert ids [T, top_k] in descending selection-score order (no gradient)."""
    with torch.no_grad():
        sel = scores + bias if bias is not None else scores.clone()
        T, E, G = sel.shape[0], cfg.n_routed_experts, cfg.n_group
        if G > 1:
            grouped = sel.view(T, G, E // G)
            if bias is not None:
                top2 = torch.sort(grouped, dim=-1, descending=True)[0][..., :min(2, E // G)]
                group_score = top2.sum(-1)
            else:
                group_score = grouped.max(-1)[0]
            kept = stable_topk(group_score, cfg.topk_group)            # [T, topk_group]
            keep = torch.zeros(T, G, dtype=torch.bool)
            keep.scatter_(1, kept, True)
            sel = grouped.masked_fill(~keep.unsqueeze(-1), float("-inf")).view(T, E)
        return stable_topk(sel, cfg.num_experts_per_tok)


def route(cfg, scores, bias, override=None):
    """Returns (ids [T, k], weights [T, k]); weights are the unbiased scores, normalised
    when norm_topk_prob, times routed_scaling_factor. `override` forces the ids."""
    ids = select_experts(cfg, scores, bias) if override is None else override
    w = scores.gather(1, ids)
    if cfg.norm_topk_prob:
        w = w / w.sum(-1, keepdim=True)
    return ids, w * cfg.routed_scaling_factor


def balance_loss(cfg, scores, B, T, alpha):
    """Sequence-wise balance loss (eq. 17-20): f from the top-k of the unbiased scores over all
    experts (a constant), P from the scores normalised per token; α·Σ f_i P_i averaged over B."""
    E, K = cfg.n_routed_experts, cfg.num_experts_per_tok
    s = scores.view(B, T, E)
    with torch.no_grad():
        chosen = torch.zeros(B, T, E, dtype=s.dtype)
        chosen.scatter_(2, stable_topk(s, K), 1.0)
        f = chosen.sum(1) * (E / (K * T))                                # [B, E]
    p = (s / s.sum(-1, keepdim=True)).mean(1)                            # [B, E]
    return (alpha * (f * p).sum(-1)).mean()


def moe(cfg, weights, prefix, x, record, override):
    B, S, h = x.shape
    xt = x.reshape(B * S, h)
    scores = router_scores(cfg, linear(xt, weights[f"{prefix}.gate.weight"]))
    ids, w = route(cfg, scores, weights.get(f"{prefix}.gate.e_score_correction_bias"), override)
    record["ids"], record["scores"] = ids, scores
    out = torch.zeros_like(xt)
    for e in range(cfg.n_routed_experts):
        tok, slot = (ids == e).nonzero(as_tuple=True)
        if tok.numel() == 0:
            continue
        y = swiglu(xt[tok], weights, f"{prefix}.experts.{e}")
        out = out.index_add(0, tok, y * w[tok, slot].unsqueeze(-1))
    if cfg.n_shared_experts:
        out = out + swiglu(xt, weights, f"{prefix}.shared_experts")
    return out.view(B, S, h)


# ----------------------------------------------------------------------------------------------
# Blocks, the model, the losses

def block(cfg, weights, L, x, rope, scale, alpha, routing, overrides):
    """One decoder layer (pre-norm attention and FFN with residuals). Returns (x, balance loss)."""
    p, eps = f"model.layers.{L}", cfg.rms_norm_eps
    cos, sin = rope
    x = x + mla(cfg, weights, f"{p}.self_attn", rms_norm(x, weights[f"{p}.input_layernorm.weight"],
                                                         eps), cos, sin, scale)
    hn = rms_norm(x, weights[f"{p}.post_attention_layernorm.weight"], eps)
    if not cfg.is_moe(L):
        return x + swiglu(hn, weights, f"{p}.mlp"), None
    record = {}
    y = moe(cfg, weights, f"{p}.mlp", hn, record, overrides.get(L))
    routing[L] = record["ids"]
    routing[("scores", L)] = record["scores"].detach()
    B, T, _ = x.shape
    return x + y, balance_loss(cfg, record["scores"], B, T, alpha)


def _mtp_table(weights, L, own_name, main_name, mtp_tables):
    if mtp_tables == "own" and f"model.layers.{L}.{own_name}" in weights:
        return weights[f"model.layers.{L}.{own_name}"]
    return weights[main_name]


def forward(cfg, weights, input_ids, labels, mtp_loss_weight=0.0, seq_aux_loss_coeff=0.0,
            routing_overrides=None, mtp_tables="own"):
    """Runs the model and its losses. input_ids, labels: int64 [B, S] (labels = next tokens).

    Returns a dict: logits [B, S, V]; loss.main; loss.mtp.<k> (unweighted L_k); loss.mtp (mean);
    loss.balance (α applied, every MoE layer); loss.total; mtp_logits.<k> [B, S−k, V];
    routing {layer: ids [B·S_layer, top_k]}; router_scores {layer: unbiased scores [B·S_layer, E]}.
    """
    if mtp_tables not in ("own", "main"):
        raise ValueError(f"mtp_tables must be 'own' or 'main', not {mtp_tables!r}")
    overrides = routing_overrides or {}
    B, S = input_ids.shape
    dtype = weights["model.embed_tokens.weight"].dtype
    eps, D = cfg.rms_norm_eps, cfg.num_nextn_predict_layers
    scale = softmax_scale(cfg, S)
    out, routing, balance = {}, {}, []
    x = weights["model.embed_tokens.weight"][input_ids]
    rope = rope_tables(cfg, S, S, dtype)
    for L in range(cfg.num_hidden_layers):
        x, bal = block(cfg, weights, L, x, rope, scale, seq_aux_loss_coeff, routing, overrides)
        balance += [bal] if bal is not None else []
    logits = linear(rms_norm(x, weights["model.norm.weight"], eps), weights["lm_head.weight"])
    out["logits"] = logits
    out["loss.main"] = F.cross_entropy(logits.reshape(B * S, -1), labels.reshape(B * S))
    h_prev, mtp_losses = x, []
    for k in range(1, D + 1):
        L, T = cfg.num_hidden_layers + k - 1, S - k
        if T <= 0:
            raise ValueError(f"sequence length {S} too short for MTP depth {k}")
        p = f"model.layers.{L}"
        emb = _mtp_table(weights, L, "embed_tokens.weight", "model.embed_tokens.weight", mtp_tables)
        head = _mtp_table(weights, L, "shared_head.head.weight", "lm_head.weight", mtp_tables)
        e = rms_norm(emb[input_ids[:, k:]], weights[f"{p}.enorm.weight"], eps)
        g = rms_norm(h_prev[:, :T], weights[f"{p}.hnorm.weight"], eps)
        hk = linear(torch.cat([e, g], dim=-1), weights[f"{p}.eh_proj.weight"])
        hk, bal = block(cfg, weights, L, hk, rope_tables(cfg, S, T, dtype), scale,
                        seq_aux_loss_coeff, routing, overrides)
        balance += [bal] if bal is not None else []
        lk = linear(rms_norm(hk, weights[f"{p}.shared_head.norm.weight"], eps), head)
        out[f"mtp_logits.{k}"] = lk
        out[f"loss.mtp.{k}"] = F.cross_entropy(lk.reshape(B * T, -1), labels[:, k:].reshape(B * T))
        mtp_losses.append(out[f"loss.mtp.{k}"])
        h_prev = hk
    zero = torch.zeros((), dtype=dtype)
    out["loss.mtp"] = torch.stack(mtp_losses).mean() if mtp_losses else zero
    out["loss.balance"] = torch.stack(balance).sum() if balance else zero
    out["loss.total"] = out["loss.main"] + mtp_loss_weight * out["loss.mtp"] + out["loss.balance"]
    out["routing"] = {L: v for L, v in routing.items() if not isinstance(L, tuple)}
    out["router_scores"] = {L[1]: v for L, v in routing.items() if isinstance(L, tuple)}
    return out


# ----------------------------------------------------------------------------------------------
# Loading and the forward + backward a comparison needs

class Reference:
    """A model directory loaded in one dtype: cfg, weights (trainable ones require grad)."""

    def __init__(self, directory, dtype=torch.float64):
        self.cfg = load_config(directory)
        weights, self.stored_dtypes = safetensors_io.load_model_dir(directory, dtype)
        check_weights(self.cfg, weights)
        self.weights = {n: t.requires_grad_(is_trainable(n)) for n, t in weights.items()}
        self.dtype = dtype

    def run(self, input_ids, labels, mtp_loss_weight, seq_aux_loss_coeff, routing_overrides=None,
            mtp_tables="own"):
        """Forward, then backward of loss.total. Returns (outputs, {name: grad}) (no bias grads)."""
        for t in self.weights.values():
            t.grad = None
        out = forward(self.cfg, self.weights, input_ids, labels, mtp_loss_weight,
                      seq_aux_loss_coeff, routing_overrides, mtp_tables)
        out["loss.total"].backward()
        grads = {n: (t.grad if t.grad is not None else torch.zeros_like(t)).detach()
                 for n, t in self.weights.items() if is_trainable(n)}
        return out, grads
