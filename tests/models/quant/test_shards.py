"""Tensor parallel over quantized checkpoints (models/parallel.py's cuts, models/quant/
shards.py's rules): each rank's quantized linears, loaded from its slices of the packed
tensors, compute its part of the whole layer; a split that cuts a group is refused by name
before any rank starts. The engine over gloo: tests/distributed/test_tensor_parallel.py."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from actorllm.models.base import CausalLM
from actorllm.models.config import CheckpointConfig
from actorllm.models.loader import load_model
from actorllm.models.parallel import TensorParallelError, shard_config
from actorllm.models.quant.apply import weight_bytes
from actorllm.models.quant.linear import QUANT_LINEARS, Int8Linear, PackedLinear
from actorllm.models.quant.shards import check_quantized_split
from actorllm.models.quant.spec import resolve_quantization
from tests.helpers.quant_checkpoints import write_quantized

FORMATS = [
    ("gptq", dict(bits=4)),
    ("gptq", dict(bits=4, desc_act=True)),  # act-order: row shards keep every group's scales
    ("gptq", dict(bits=8, sym=True, group_size=-1)),
    ("awq", dict()),
    ("w4a16", dict()),  # compressed-tensors pack-quantized (weight_shape per rank)
    ("w8a8", dict()),  # per-channel scales: replicated on row-parallel layers
    ("fp8", dict()),  # per-tensor scales
    ("fp8", dict(block=(32, 32))),  # block scales: split by whole blocks
    ("ct_fp8", dict()),  # per-channel fp8
]


def _load(path: Path, rank: int, size: int) -> CausalLM:
    cfg = shard_config(CheckpointConfig.from_pretrained(path), rank, size)
    return load_model(path, cfg, dtype=torch.float32)


def _parts(x: torch.Tensor, sizes: list[int]) -> list[torch.Tensor]:
    return list(x.split(sizes, dim=-1))


@pytest.mark.usefixtures("float_inputs")
@pytest.mark.parametrize(
    ("method", "kw"), FORMATS, ids=[f"{m}-{sorted(k.items())}" for m, k in FORMATS]
)
def test_rank_shards_compute_their_part_of_the_whole_layer(
    tmp_path: Path, method: str, kw: dict[str, Any]
) -> None:
    """Column-parallel (qkv, gate_up): each rank's outputs are its rows of every fused
    part; row-parallel (o, down): the ranks' outputs on their input columns sum to the
    whole. 3 rows take the native kernel, 40 the dequantized tiles."""
    _ref, quant = write_quantized(tmp_path, method, **kw)
    full, ranks = _load(quant, 0, 1), [_load(quant, r, 2) for r in (0, 1)]
    w8a8 = method == "w8a8"
    gen = torch.Generator().manual_seed(0)
    seen = 0
    for name, layer in full.named_modules():
        if not isinstance(layer, QUANT_LINEARS):
            continue
        seen += 1
        locals_ = [m.get_submodule(name) for m in ranks]
        for rows in (3, 40):
            x = torch.randn(rows, layer.in_features, generator=gen)
            want = layer(x)  # [M, O]
            if name.endswith(("o_proj", "down_proj")):
                cols = locals_[0].in_features
                got = sum(lin(x[:, r * cols : (r + 1) * cols]) for r, lin in enumerate(locals_))
                # W8A8: each rank quantizes its own input columns (a scale per row each).
                tol = dict(atol=0.05, rtol=0.05) if w8a8 else dict(atol=1e-4, rtol=1e-4)
                torch.testing.assert_close(got, want, **tol)
                continue
            sizes = layer.shard_sizes or [layer.out_features]
            for r, lin in enumerate(locals_):
                local = lin.shard_sizes or [lin.out_features]
                pieces = zip(_parts(lin(x), local), _parts(want, sizes), local, strict=True)
                for got, whole, n in pieces:
                    torch.testing.assert_close(got, whole[:, r * n : (r + 1) * n])
    assert seen == 2 * 4  # qkv, o, gate_up, down of both layers
    # Each rank holds its half of every quantized linear (scales of act-order row shards
    # and per-channel ones of row-parallel layers are kept whole: a little more).
    half = [_quant_bytes(m) for m in ranks]
    assert all(b < 0.6 * _quant_bytes(full) for b in half), (half, _quant_bytes(full))


def _quant_bytes(model: CausalLM) -> int:
    return sum(weight_bytes(m) for m in model.modules() if isinstance(m, QUANT_LINEARS))


@pytest.mark.usefixtures("float_inputs")
@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_a_quantized_lm_head_splits_by_vocabulary_rows(tmp_path: Path, method: str) -> None:
    """Each rank's head computes its vocabulary rows' logits (128 rows: 64 a rank) from
    its half of the packed tensors."""
    _ref, quant = write_quantized(tmp_path, method, lm_head=True)
    full, ranks = _load(quant, 0, 1), [_load(quant, r, 2) for r in (0, 1)]
    assert isinstance(full.lm_head, PackedLinear) and full.lm_head.out_features == 128
    x = torch.randn(5, full.lm_head.in_features, generator=torch.Generator().manual_seed(0))
    want = full.lm_head(x)  # [5, V]
    for r, model in enumerate(ranks):
        head = model.lm_head
        assert isinstance(head, PackedLinear) and head.out_features == 64
        torch.testing.assert_close(head(x), want[:, r * 64 : (r + 1) * 64])
        assert weight_bytes(head) < 0.6 * weight_bytes(full.lm_head)


def test_a_quantized_lm_head_split_off_packed_words_is_refused(tmp_path: Path) -> None:
    """Vocab 136: 68 rows a rank do not fill whole int32 words of GPTQ's qzeros."""
    _ref, quant = write_quantized(tmp_path, "gptq", lm_head=True, vocab_size=136)
    cfg = CheckpointConfig.from_pretrained(quant)
    spec = resolve_quantization(cfg.quantization_config, None)
    assert spec is not None and spec.quantizes_head()
    with pytest.raises(TensorParallelError, match=r"tensor_parallel_size=2: lm_head \(gptq\)"):
        check_quantized_split(cfg, spec, 2)
    check_quantized_split(cfg, spec, 1)


def test_act_order_row_shards_keep_every_groups_scales(tmp_path: Path) -> None:
    """A random act-order g_idx spreads a rank's input rows over all groups: the rank
    indexes each column's group (as vLLM keeps the full scales); one in order keeps only
    its own groups, in the native kernel's layout."""
    _ref, quant = write_quantized(tmp_path, "gptq", bits=4, desc_act=True)
    down = _load(quant, 1, 2).get_submodule("model.layers.0.mlp.down_proj")
    assert isinstance(down, PackedLinear) and down.col_groups is not None
    assert tuple(down.w_scales.shape) == (64, 128 // 32)  # [O, G] of the whole layer
    _ref, plain = write_quantized(tmp_path / "in_order", "gptq", bits=4)
    config = plain / "config.json"
    for desc_act in (False, True):  # True: static groups, g_idx in order
        raw = json.loads(config.read_text())
        raw["quantization_config"]["desc_act"] = desc_act
        config.write_text(json.dumps(raw))
        whole = _load(plain, 0, 1).get_submodule("model.layers.0.mlp.down_proj")
        down = _load(plain, 1, 2).get_submodule("model.layers.0.mlp.down_proj")
        assert isinstance(down, PackedLinear) and isinstance(whole, PackedLinear)
        assert down.col_groups is None
        torch.testing.assert_close(down.w_scales, whole.w_scales[:, 2:])  # groups 2, 3


def test_w8a8_row_shards_keep_the_per_channel_scales(tmp_path: Path) -> None:
    _ref, quant = write_quantized(tmp_path, "w8a8")
    full = _load(quant, 0, 1).get_submodule("model.layers.0.self_attn.o_proj")
    for r in (0, 1):
        o = _load(quant, r, 2).get_submodule("model.layers.0.self_attn.o_proj")
        assert isinstance(o, Int8Linear) and isinstance(full, Int8Linear)
        torch.testing.assert_close(o.weight_scale, full.weight_scale)
        torch.testing.assert_close(o.int8_weight(), full.int8_weight()[:, r * 64 : (r + 1) * 64])


@pytest.mark.parametrize(
    ("method", "kw", "named"),
    [
        # down_proj's 64 inputs are one group of 64: 32 per rank cut it.
        ("gptq", dict(group_size=64, intermediate_size=64), r"down_proj .* group_size 64"),
        ("awq", dict(group_size=64, intermediate_size=64), r"down_proj .* group_size 64"),
        # k/v's 32 rows per rank are not whole blocks of 64.
        ("fp8", dict(block=(64, 32)), r"qkv_proj .* block_n = 64"),
        # Each expert's down_proj: 16 of its 32 inputs per rank, groups of 32.
        ("gptq", dict(family="qwen3_moe"), r"mlp\.experts\.0\.down_proj .* group_size 32"),
    ],
)
def test_a_split_that_cuts_a_group_or_block_is_refused_by_name(
    tmp_path: Path, method: str, kw: dict[str, Any], named: str
) -> None:
    _ref, quant = write_quantized(tmp_path, method, **kw)
    cfg = CheckpointConfig.from_pretrained(quant)
    spec = resolve_quantization(cfg.quantization_config, None)
    assert spec is not None
    head = r"tensor_parallel_size=2: model\.layers\.0\."
    with pytest.raises(TensorParallelError, match=head) as err:
        check_quantized_split(cfg, spec, 2)
    assert err.match(named) and err.match("too large tensor parallel size")
    assert err.value.param == "tensor_parallel_size"
    check_quantized_split(cfg, spec, 1)  # whole at TP=1
