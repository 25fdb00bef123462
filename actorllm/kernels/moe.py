"""Mixture-of-Experts: top-k routing and the fused expert MLP, torch reference.

Shapes: ``T`` tokens, hidden ``H``, ``E`` experts of intermediate size ``I``, ``K`` experts
per token. Expert weights are stacked at load time (``models/moe.py``):

* ``w13``: [E, 2I, H], each expert's gate rows then up rows (HF's gate_proj | up_proj,
  Mixtral's w1 | w3);
* ``w2``: [E, H, I], each expert's down projection;
* gpt-oss only: ``w13_bias`` [E, 2I] (gate | up, like the rows) and ``w2_bias`` [E, H].

``fused_moe`` sorts the T*K (token, expert) pairs by expert once, so each expert's tokens
sit in one contiguous run, and runs the experts as one grouped GEMM over those runs:
gate-up, activation, down, scale by the routing weight, then sum each token's K rows.
The Triton kernel (``kernels/triton/moe.py``) computes the same thing on the GPU.

    >>> x = torch.randn(3, 8)
    >>> w13, w2 = torch.randn(4, 2 * 6, 8), torch.randn(4, 8, 6)
    >>> weights, ids = route_topk(torch.randn(3, 4), top_k=2, renormalize=True)
    >>> fused_moe(x, w13, w2, weights, ids).shape
    torch.Size([3, 8])
"""

from __future__ import annotations

from collections.abc import Callable

import torch
import torch.nn.functional as F


def route_topk(
    router_logits: torch.Tensor, top_k: int, renormalize: bool
) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax over all experts in float32, then the top ``top_k``; with ``renormalize``
    the chosen weights are divided by their sum (Mixtral always; Qwen-MoE and OLMoE when
    ``norm_topk_prob``). Top-k then softmax over the chosen logits is the same thing as
    softmax, top-k, renormalise, so it needs no mode of its own.

    router_logits: [T, E] -> (weights [T, K] float32, expert ids [T, K] int64).
    """
    probs = torch.softmax(router_logits.float(), dim=-1)  # [T, E]
    weights, ids = torch.topk(probs, top_k, dim=-1)  # [T, K]
    if renormalize:
        weights = weights / weights.sum(dim=-1, keepdim=True)
    return weights, ids


def route_sparsemixer(
    router_logits: torch.Tensor, jitter_eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """PhiMoE's top-2 routing (sparsemixer), as transformers runs it outside training.
    The first expert is the top logit, weighted by the softmax over the logits within
    ``2 * jitter_eps`` (relative) of it; the second is the top of the rest, weighted by the
    softmax over the rest within that distance of *it*. The weights are not renormalised.

    router_logits: [T, E] -> (weights [T, 2] float32, expert ids [T, 2] int64).
    """
    scores = router_logits.float()  # [T, E]
    w1, first = _sparsemixer_pick(scores, scores, jitter_eps)  # [T, 1] each
    rest = scores.scatter(-1, first, float("-inf"))  # the first expert left out
    w2, second = _sparsemixer_pick(scores, rest, jitter_eps)
    return torch.cat([w1, w2], dim=-1), torch.cat([first, second], dim=-1)


def _sparsemixer_pick(
    scores: torch.Tensor, candidates: torch.Tensor, jitter_eps: float
) -> tuple[torch.Tensor, torch.Tensor]:
    """The top of ``candidates`` [T, E] and its weight: the softmax over the candidates
    whose ``scores`` lie within ``2 * jitter_eps`` of it, relative to ``max(|score|, top)``.
    Returns (weight [T, 1], id [T, 1])."""
    top, ids = candidates.max(dim=-1, keepdim=True)  # [T, 1]
    factor = scores.abs().clamp(min=top)  # [T, E]
    far = (top - scores) / factor > 2 * jitter_eps
    gates = torch.softmax(candidates.masked_fill(far, float("-inf")), dim=-1)  # [T, E]
    return gates.gather(-1, ids), ids


def gated_activation(
    name: str, swiglu_limit: float = 7.0, swiglu_alpha: float = 1.702
) -> Callable[[torch.Tensor], torch.Tensor]:
    """``[.., 2I] (gate | up) -> [.., I]`` for an HF ``hidden_act`` name, or vLLM's
    "swigluoai" (gpt-oss's clamped SwiGLU, with ``swiglu_limit`` / ``swiglu_alpha``); raises
    ``ValueError`` for one the engine does not implement."""
    if name == "swigluoai":
        return lambda x: _swigluoai_and_mul(x, swiglu_limit, swiglu_alpha)
    if name in ("silu", "swish"):
        return _silu_and_mul
    if name in ("gelu_pytorch_tanh", "gelu_new", "gelu_tanh", "gelu_fast"):
        return _gelu_tanh_and_mul
    if name == "gelu":
        return _gelu_and_mul
    raise ValueError(
        f"unsupported hidden_act {name!r} (supported: silu, gelu, gelu_pytorch_tanh, swigluoai)"
    )


def _swigluoai_and_mul(x: torch.Tensor, limit: float, alpha: float) -> torch.Tensor:
    """gpt-oss: gate clamped to <= limit, up to [-limit, limit], then
    ``(up + 1) * gate * sigmoid(alpha * gate)`` (HF's GptOssExperts._apply_gate; its
    checkpoints interleave gate and up, the loader splits them into gate | up)."""
    d = x.shape[-1] // 2
    gate, up = x[..., :d].clamp(max=limit), x[..., d:].clamp(-limit, limit)
    return (gate * torch.sigmoid(gate * alpha)).mul_(up + 1)


def _silu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.silu(x[..., :d]).mul_(x[..., d:])  # in place on silu's fresh output


def _gelu_tanh_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d], approximate="tanh").mul_(x[..., d:])


def _gelu_and_mul(x: torch.Tensor) -> torch.Tensor:
    d = x.shape[-1] // 2
    return F.gelu(x[..., :d]).mul_(x[..., d:])


def sort_by_expert(topk_ids: torch.Tensor, num_experts: int) -> tuple[torch.Tensor, torch.Tensor]:
    """(order [T*K] int64, counts [E] int64): ``order`` lists flat (token, slot) pair indices
    grouped by expert (stable, so tokens keep their order within an expert); expert e's
    pairs are ``order[sum(counts[:e]) : sum(counts[:e + 1])]``. Pair p is token p // K."""
    flat = topk_ids.flatten()  # [T*K]
    order = torch.argsort(flat, stable=True)
    counts = torch.bincount(flat, minlength=num_experts)
    return order, counts


def fused_moe(
    x: torch.Tensor,
    w13: torch.Tensor,
    w2: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    activation: str = "silu",
    *,
    w13_bias: torch.Tensor | None = None,
    w2_bias: torch.Tensor | None = None,
    swiglu_limit: float = 7.0,
    swiglu_alpha: float = 1.702,
) -> torch.Tensor:
    """sum_k topk_weights[t, k] * expert_{topk_ids[t, k]}(x[t]): [T, H] -> [T, H], x's dtype.

    x: [T, H]; w13: [E, 2I, H]; w2: [E, H, I]; topk_weights: [T, K] float32; topk_ids:
    [T, K] int. The grouped GEMM runs each expert's contiguous run of sorted rows.
    gpt-oss: ``w13_bias`` [E, 2I] / ``w2_bias`` [E, H] added after each projection;
    ``swiglu_*`` are read by the "swigluoai" activation only.
    """
    act = gated_activation(activation, swiglu_limit, swiglu_alpha)

    def expert(e: int, xe: torch.Tensor, ye: torch.Tensor) -> None:
        gu = torch.mm(xe, w13[e].t())  # [n, 2I]
        h = act(gu if w13_bias is None else gu.add_(w13_bias[e]))  # [n, I]
        torch.mm(h, w2[e].t(), out=ye)  # [n, H], in place
        if w2_bias is not None:
            ye.add_(w2_bias[e])

    return run_experts(x, topk_weights, topk_ids, w13.shape[0], expert)


def run_experts(
    x: torch.Tensor,
    topk_weights: torch.Tensor,
    topk_ids: torch.Tensor,
    num_experts: int,
    expert: Callable[[int, torch.Tensor, torch.Tensor], None],
) -> torch.Tensor:
    """sum_k topk_weights[t, k] * expert_{topk_ids[t, k]}(x[t]): [T, H] -> [T, H], x's
    dtype. The (token, expert) pairs are sorted by expert and ``expert(e, xe, ye)`` maps
    each active expert's run of rows ``xe`` [n, H] into ``ye`` [n, H] (the reference
    fused_moe, and the quantized experts whose weights only their own code can read)."""
    k = topk_ids.shape[1]
    order, counts = sort_by_expert(topk_ids, num_experts)  # [T*K], [E]
    rows = order // k  # [T*K] token of each sorted pair
    xs = x.index_select(0, rows)  # [T*K, H], grouped by expert
    ys = torch.empty_like(xs)
    # Deliberate host sync: each active expert's run of rows is sliced on the host.
    start = 0
    for e, n in enumerate(counts.tolist()):
        if n:
            expert(e, xs[start : start + n], ys[start : start + n])
            start += n
    ys.mul_(topk_weights.flatten().index_select(0, order).unsqueeze(1).to(ys.dtype))
    return torch.zeros_like(x).index_add_(0, rows, ys)  # [T, H]: each token's K rows
