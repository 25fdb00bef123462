"""Tensor-parallel shards (models/parallel.py): each rank's slices, read from safetensors,
put back together, are the whole checkpoint; what cannot be split is refused."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from actorllm.models.config import CheckpointConfig
from actorllm.models.loader import load_model
from actorllm.models.parallel import TensorParallelError, check_tensor_parallel, shard_config
from tests.helpers.models import make_tiny_checkpoint


def _load(path: Path, rank: int, size: int) -> dict[str, torch.Tensor]:
    cfg = shard_config(CheckpointConfig.from_pretrained(path), rank, size)
    model = load_model(path, cfg, dtype=torch.float32)
    return {k: v.detach() for k, v in model.state_dict().items()}


def test_rank_slices_put_together_are_the_checkpoint(tmp_path: Path) -> None:
    # 4 query heads, 1 KV head (replicated on both ranks), vocab 131 (padded to 2 * 66).
    path = make_tiny_checkpoint(tmp_path, "qwen2", vocab_size=131, num_kv_heads=1)
    full, r0, r1 = _load(path, 0, 1), _load(path, 0, 2), _load(path, 1, 2)
    d = 16  # head_dim: hidden 64 / 4 heads
    qkv = "model.layers.0.self_attn.qkv_proj.weight"  # [q 64 | k 16 | v 16, 64] whole
    assert r0[qkv].shape == (2 * d + d + d, 64)
    torch.testing.assert_close(torch.cat([r0[qkv][: 2 * d], r1[qkv][: 2 * d]]), full[qkv][: 4 * d])
    for part in (slice(2 * d, 3 * d), slice(3 * d, 4 * d)):  # k and v: the one head, twice
        torch.testing.assert_close(
            r0[qkv][part], full[qkv][4 * d :][part.start - 2 * d : part.stop - 2 * d]
        )
        torch.testing.assert_close(r1[qkv][part], r0[qkv][part])
    bias = "model.layers.0.self_attn.qkv_proj.bias"  # Qwen2's q/k/v bias follows its rows
    torch.testing.assert_close(
        torch.cat([r0[bias][: 2 * d], r1[bias][: 2 * d]]), full[bias][: 4 * d]
    )
    o = "model.layers.0.self_attn.o_proj.weight"  # row-parallel: input columns split
    torch.testing.assert_close(torch.cat([r0[o], r1[o]], dim=1), full[o])
    down = "model.layers.1.mlp.down_proj.weight"
    torch.testing.assert_close(torch.cat([r0[down], r1[down]], dim=1), full[down])
    emb = "model.embed_tokens.weight"
    assert r0[emb].shape == r1[emb].shape == (66, 64)
    torch.testing.assert_close(torch.cat([r0[emb], r1[emb]])[:131], full[emb])
    assert not r1[emb][65:].any()  # the padding row
    norm = "model.layers.0.input_layernorm.weight"
    torch.testing.assert_close(r1[norm], full[norm])


def test_a_fused_multi_query_c_attn_is_cut_into_each_ranks_q_k_v(tmp_path: Path) -> None:
    """GPTBigCode's c_attn: [q 64 | k 16 | v 16] rows; each rank its 2 query heads and the
    one KV head."""
    path = make_tiny_checkpoint(tmp_path, "gpt_bigcode", num_layers=1)
    full, r0, r1 = _load(path, 0, 1), _load(path, 0, 2), _load(path, 1, 2)
    d = 16
    for leaf in ("weight", "bias"):
        qkv = f"model.layers.0.self_attn.qkv_proj.{leaf}"
        assert r0[qkv].shape[0] == r1[qkv].shape[0] == 4 * d
        torch.testing.assert_close(torch.cat([r0[qkv][:32], r1[qkv][:32]]), full[qkv][:64])
        torch.testing.assert_close(r0[qkv][32:], full[qkv][64:])  # k | v, on both ranks
        torch.testing.assert_close(r1[qkv][32:], full[qkv][64:])


def test_row_parallel_bias_is_counted_once(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(tmp_path, "granite")  # o_proj and down_proj have biases
    full, r0, r1 = _load(path, 0, 1), _load(path, 0, 2), _load(path, 1, 2)
    for name in ("model.layers.0.self_attn.o_proj.bias", "model.layers.0.mlp.down_proj.bias"):
        torch.testing.assert_close(r0[name], full[name])
        assert not r1[name].any()


ARCHS = {"llama": "LlamaForCausalLM", "gpt2": "GPT2LMHeadModel", "olmo2": "Olmo2ForCausalLM"}


@pytest.mark.parametrize(
    ("family", "extra", "named"),
    [
        ("llama", {"num_heads": 4}, None),
        (
            "llama",
            {"hidden_size": 48, "num_heads": 6, "num_kv_heads": 6},
            "num_attention_heads 6",
        ),
        ("gpt2", {}, None),
        ("olmo2", {}, "q/k norm"),
    ],
)
def test_what_cannot_be_split_is_refused(family: str, extra: dict, named: str | None) -> None:
    from tests.helpers.models import tiny_config

    raw = tiny_config(family, **extra).to_dict()  # type: ignore[arg-type]
    raw["architectures"] = [ARCHS[family]]
    cfg = CheckpointConfig.from_dict(raw)
    if named is None:
        check_tensor_parallel(cfg, 4)
        return
    with pytest.raises(TensorParallelError, match=named):
        check_tensor_parallel(cfg, 4)


def test_stacked_experts_split_per_expert_from_a_lazy_slice(tmp_path: Path) -> None:
    """transformers 5's stacked experts (gate_up [E, 2I, H], down [E, H, I]), read as
    safetensors slices: each rank gets its I/N columns of gate and of up, of every expert."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    from actorllm.models.parallel import rank_piece

    e, i, h = 3, 8, 5
    gate_up, down = torch.randn(e, 2 * i, h), torch.randn(e, h, i)
    save_file({"gu": gate_up, "d": down}, str(tmp_path / "x.safetensors"))
    raw = tiny_config_dict("llama")
    cfg = CheckpointConfig.from_dict(raw)
    for rank in (0, 1):
        local = shard_config(cfg, rank, 2)
        lo, hi = rank * i // 2, (rank + 1) * i // 2
        with safe_open(str(tmp_path / "x.safetensors"), framework="pt") as f:
            w13 = rank_piece(local, "mlp.experts.w13", (e, i, h), f.get_slice("gu"))
            w2 = rank_piece(local, "mlp.experts.w2", (e, h, i // 2), f.get_slice("d"))
        want = torch.cat([gate_up[:, lo:hi], gate_up[:, i + lo : i + hi]], dim=1)
        torch.testing.assert_close(w13, want)
        torch.testing.assert_close(w2, down[..., lo:hi])


def tiny_config_dict(family: str) -> dict:
    from tests.helpers.models import tiny_config

    raw = tiny_config(family).to_dict()  # type: ignore[arg-type]
    raw["architectures"] = [ARCHS[family]]
    return raw
