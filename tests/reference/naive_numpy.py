"""A second, deliberately naive float64 NumPy forward (per token, per head, per expert loops, Python
sorting for the routing) used only by test_reference.py to cross-check the layout handling of
dsv3_reference.py: head splits, RoPE pairs, kv_b/q_b row order, routing, MTP shifts."""

import math

import numpy as np


def rms(v, w, eps):
    return v / math.sqrt(float(np.mean(v * v)) + eps) * w


def rotate_pairs(v, pos, freqs):
    out = v.copy()
    for j, f in enumerate(freqs):
        z = complex(v[2 * j], v[2 * j + 1]) * complex(math.cos(pos * f), math.sin(pos * f))
        out[2 * j], out[2 * j + 1] = z.real, z.imag
    return out


def silu(v):
    return v / (1.0 + np.exp(-v))


def mlp(W, p, v):
    return W[f"{p}.down_proj.weight"] @ (silu(W[f"{p}.gate_proj.weight"] @ v) *
                                        (W[f"{p}.up_proj.weight"] @ v))


def attention(cfg, W, p, xs, freqs, scale):
    """xs: list of [h] vectors (one sequence). Returns the list of outputs."""
    n, dn, dr, dv, r = (cfg.num_attention_heads, cfg.qk_nope_head_dim, cfg.qk_rope_head_dim,
                        cfg.v_head_dim, cfg.kv_lora_rank)
    eps, dqk = cfg.rms_norm_eps, dn + dr
    qs, ks, vs = [], [], []
    for t, x in enumerate(xs):
        if cfg.q_lora_rank:
            q = W[f"{p}.q_b_proj.weight"] @ rms(W[f"{p}.q_a_proj.weight"] @ x,
                                                W[f"{p}.q_a_layernorm.weight"], eps)
        else:
            q = W[f"{p}.q_proj.weight"] @ x
        a = W[f"{p}.kv_a_proj_with_mqa.weight"] @ x
        kv = W[f"{p}.kv_b_proj.weight"] @ rms(a[:r], W[f"{p}.kv_a_layernorm.weight"], eps)
        k_rope = rotate_pairs(a[r:], t, freqs)
        qh, kh, vh = [], [], []
        for i in range(n):
            qi = q[i * dqk:(i + 1) * dqk]
            qh.append(np.concatenate([qi[:dn], rotate_pairs(qi[dn:], t, freqs)]))
            kvi = kv[i * (dn + dv):(i + 1) * (dn + dv)]
            kh.append(np.concatenate([kvi[:dn], k_rope]))
            vh.append(kvi[dn:])
        qs.append(qh), ks.append(kh), vs.append(vh)
    outs = []
    for t in range(len(xs)):
        heads = []
        for i in range(n):
            logits = [float(qs[t][i] @ ks[u][i]) * scale for u in range(t + 1)]
            m = max(logits)
            e = [math.exp(v - m) for v in logits]
            heads.append(sum(e[u] / sum(e) * vs[u][i] for u in range(t + 1)))
        outs.append(W[f"{p}.o_proj.weight"] @ np.concatenate(heads))
    return outs


def route_token(cfg, s, bias):
    """Python-sorted routing of one token's scores s (list). Returns (ids, weights)."""
    E, G, k = cfg.n_routed_experts, cfg.n_group, cfg.num_experts_per_tok
    sel = [s[e] + (bias[e] if bias is not None else 0.0) for e in range(E)]
    per = E // G
    allowed = list(range(E))
    if G > 1:
        def gscore(g):
            vals = sorted(sel[g * per:(g + 1) * per], reverse=True)
            return sum(vals[:2]) if bias is not None else vals[0]
        groups = sorted(range(G), key=lambda g: (-gscore(g), g))[:cfg.topk_group]
        allowed = [e for e in range(E) if e // per in groups]
    ids = sorted(allowed, key=lambda e: (-sel[e], e))[:k]
    w = [s[e] for e in ids]
    if cfg.norm_topk_prob:
        total = sum(w)
        w = [v / total for v in w]
    return ids, [v * cfg.routed_scaling_factor for v in w]


def moe_token(cfg, W, p, x, bias):
    logits = W[f"{p}.gate.weight"] @ x
    if cfg.scoring_func == "sigmoid":
        s = list(1.0 / (1.0 + np.exp(-logits)))
    else:
        e = np.exp(logits - logits.max())
        s = list(e / e.sum())
    ids, w = route_token(cfg, s, bias)
    y = sum(wi * mlp(W, f"{p}.experts.{e}", x) for e, wi in zip(ids, w))
    if cfg.n_shared_experts:
        y = y + mlp(W, f"{p}.shared_experts", x)
    return y, ids, s


def seq_balance(cfg, scores, alpha):
    """scores: list over tokens of lists over experts (one sequence)."""
    E, K, T = cfg.n_routed_experts, cfg.num_experts_per_tok, len(scores)
    count = [0] * E
    for s in scores:
        for e in sorted(range(E), key=lambda e: (-s[e], e))[:K]:
            count[e] += 1
    f = [E / (K * T) * c for c in count]
    P = [sum(s[e] / sum(s) for s in scores) / T for e in range(E)]
    return alpha * sum(fi * pi for fi, pi in zip(f, P))


def layer(cfg, W, L, xs, freqs, scale, alpha, is_moe, routing):
    p, eps = f"model.layers.{L}", cfg.rms_norm_eps
    att = attention(cfg, W, f"{p}.self_attn", [rms(x, W[f"{p}.input_layernorm.weight"], eps)
                                                for x in xs], freqs, scale)
    xs = [x + a for x, a in zip(xs, att)]
    ys, scores = [], []
    bias = W.get(f"{p}.mlp.gate.e_score_correction_bias")
    for x in xs:
        hn = rms(x, W[f"{p}.post_attention_layernorm.weight"], eps)
        if is_moe:
            y, ids, s = moe_token(cfg, W, f"{p}.mlp", hn, bias)
            routing.setdefault(L, []).append(ids)
            scores.append(s)
        else:
            y = mlp(W, f"{p}.mlp", hn)
        ys.append(x + y)
    return ys, (seq_balance(cfg, scores, alpha) if is_moe else 0.0)


def cross_entropy(logits, target):
    m = logits.max()
    return float(m + math.log(np.exp(logits - m).sum()) - logits[target])


def forward_sequence(cfg, W, ids, labels, freqs, scale, alpha):
    """One sequence. Returns (logits [S, V], main CE sum, [CE sums per depth], balance, routing)."""
    eps, routing, balance = cfg.rms_norm_eps, {}, 0.0
    xs = [W["model.embed_tokens.weight"][t] for t in ids]
    for L in range(cfg.num_hidden_layers):
        xs, bal = layer(cfg, W, L, xs, freqs, scale, alpha, L >= cfg.first_k_dense_replace, routing)
        balance += bal
    logits = np.stack([W["lm_head.weight"] @ rms(x, W["model.norm.weight"], eps) for x in xs])
    main = sum(cross_entropy(logits[i], labels[i]) for i in range(len(ids)))
    depth_ce, h = [], xs
    last_moe = cfg.num_hidden_layers - 1 >= cfg.first_k_dense_replace
    for k in range(1, cfg.num_nextn_predict_layers + 1):
        L, p, T = cfg.num_hidden_layers + k - 1, f"model.layers.{cfg.num_hidden_layers + k - 1}", \
            len(ids) - k
        emb = W.get(f"{p}.embed_tokens.weight", W["model.embed_tokens.weight"])
        head = W.get(f"{p}.shared_head.head.weight", W["lm_head.weight"])
        hs = [W[f"{p}.eh_proj.weight"] @ np.concatenate([
            rms(emb[ids[i + k]], W[f"{p}.enorm.weight"], eps),
            rms(h[i], W[f"{p}.hnorm.weight"], eps)]) for i in range(T)]
        h, bal = layer(cfg, W, L, hs, freqs, scale, alpha, last_moe, routing)
        balance += bal
        depth_ce.append(sum(cross_entropy(head @ rms(h[i], W[f"{p}.shared_head.norm.weight"], eps),
                                          labels[i + k]) for i in range(T)))
    return logits, main, depth_ce, balance, routing
