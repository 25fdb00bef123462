"""The fused-MoE torch reference against a naive per-token loop, and its routing rules."""

from __future__ import annotations

import pytest
import torch

from actorllm.kernels.moe import (
    fused_moe,
    gated_activation,
    route_sparsemixer,
    route_topk,
    sort_by_expert,
)


def _naive(x, w13, w2, weights, ids, activation="silu"):  # type: ignore[no-untyped-def]
    """Token by token, slot by slot, in float64."""
    act = gated_activation(activation)
    out = torch.zeros(x.shape, dtype=torch.float64)
    for t in range(x.shape[0]):
        for j in range(ids.shape[1]):
            e = int(ids[t, j])
            h = act(w13[e].double() @ x[t].double())
            out[t] += float(weights[t, j]) * (w2[e].double() @ h)
    return out


@pytest.mark.parametrize("activation", ["silu", "gelu_pytorch_tanh"])
@pytest.mark.parametrize("t,e,k", [(1, 4, 2), (7, 4, 2), (13, 8, 3), (5, 3, 1)])
def test_fused_moe_matches_naive_loop(t: int, e: int, k: int, activation: str) -> None:
    g = torch.Generator().manual_seed(t * 100 + e)
    h, i = 16, 12
    x = torch.randn(t, h, generator=g)
    w13 = torch.randn(e, 2 * i, h, generator=g) / 4
    w2 = torch.randn(e, h, i, generator=g) / 4
    weights, ids = route_topk(torch.randn(t, e, generator=g), k, renormalize=False)
    got = fused_moe(x, w13, w2, weights, ids, activation)
    want = _naive(x, w13, w2, weights, ids, activation)
    torch.testing.assert_close(got.double(), want, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("t,e,k", [(1, 4, 2), (9, 4, 2), (13, 8, 4)])
def test_gpt_oss_experts_match_hf_loop(t: int, e: int, k: int) -> None:
    """gpt-oss: biases on both projections and the clamped SwiGLU, against transformers'
    own expert loop on its layout (gate_up [E, H, 2I] interleaved, down [E, I, H])."""
    from transformers import GptOssConfig
    from transformers.models.gpt_oss.modeling_gpt_oss import GptOssExperts

    g = torch.Generator().manual_seed(t + e)
    h, i, limit, alpha = 16, 12, 1.5, 1.3  # a low limit so the clamps really bite
    cfg = GptOssConfig(hidden_size=h, intermediate_size=i, num_local_experts=e,
                       swiglu_limit=limit, swiglu_alpha=alpha)  # fmt: skip
    hf = GptOssExperts(cfg)
    with torch.no_grad():
        for p in hf.parameters():
            p.copy_(torch.randn(p.shape, generator=g))
    x = torch.randn(t, h, generator=g)
    weights, ids = route_topk(torch.randn(t, e, generator=g), k, renormalize=True)
    want = hf(x, ids, weights)
    # Our layout: [E, 2I, H] gate rows then up rows; [E, H, I].
    gu, gub = hf.gate_up_proj.detach().transpose(1, 2), hf.gate_up_proj_bias.detach()
    w13 = torch.cat([gu[:, 0::2], gu[:, 1::2]], dim=1)
    b13 = torch.cat([gub[:, 0::2], gub[:, 1::2]], dim=1)
    w2 = hf.down_proj.detach().transpose(1, 2)
    got = fused_moe(
        x, w13, w2, weights, ids, "swigluoai", w13_bias=b13,
        w2_bias=hf.down_proj_bias.detach(), swiglu_limit=limit, swiglu_alpha=alpha,
    )  # fmt: skip
    torch.testing.assert_close(got, want, atol=1e-4, rtol=1e-4)


def test_routing_softmax_topk_and_renormalisation() -> None:
    logits = torch.tensor([[2.0, 1.0, 0.0, -1.0], [0.0, 0.0, 3.0, 1.0]])
    w, ids = route_topk(logits, 2, renormalize=False)
    probs = logits.softmax(-1)
    assert ids.tolist() == [[0, 1], [2, 3]]
    torch.testing.assert_close(w, probs.gather(1, ids))
    wn, idn = route_topk(logits, 2, renormalize=True)
    assert idn.tolist() == ids.tolist()
    torch.testing.assert_close(wn.sum(-1), torch.ones(2))
    # Renormalised softmax-then-top-k is top-k-then-softmax over the chosen logits.
    torch.testing.assert_close(wn, logits.gather(1, ids).softmax(-1))


def test_sort_by_expert_groups_pairs_stably() -> None:
    ids = torch.tensor([[2, 0], [0, 1], [2, 1]])
    order, counts = sort_by_expert(ids, 4)
    assert counts.tolist() == [2, 2, 2, 0]
    assert order.tolist() == [1, 2, 3, 5, 0, 4]  # expert 0: pairs 1, 2; 1: 3, 5; 2: 0, 4


def test_unknown_activation_is_refused() -> None:
    with pytest.raises(ValueError, match="relu2"):
        gated_activation("relu2")


@pytest.mark.parametrize("jitter_eps", [0.01, 0.3])
def test_sparsemixer_routing_is_transformers_phimoe_outside_training(jitter_eps: float) -> None:
    """Logits in clusters, so the relative-distance masks keep several experts for some
    tokens and one for others; the second pick's mask is measured from the second top."""
    from transformers.models.phimoe.modeling_phimoe import sparsemixer

    g = torch.Generator().manual_seed(0)
    base = torch.randn(64, 1, generator=g) * 3  # [T, 1]
    logits = base + torch.randn(64, 8, generator=g) * torch.rand(64, 1, generator=g) * 0.1
    logits[::5] = torch.randn(13, 8, generator=g) * 3  # some tokens far apart
    ref_w, ref_ids = sparsemixer(logits, jitter_eps=jitter_eps, training=False)
    w, ids = route_sparsemixer(logits, jitter_eps)
    assert torch.equal(ids, ref_ids)
    torch.testing.assert_close(w, ref_w, rtol=0, atol=1e-7)
    assert (w.sum(-1) < 1.999).any()  # not renormalised: the masks kept several experts
