"""Tensor parallelism over GGUF files: each rank keeps its piece of every weight in its
blocks (rows for column-parallel, whole groups of input columns for row-parallel, padded
vocabulary rows for the head); TP=2 gives TP=1's greedy tokens with about half the
weight bytes a rank; a split that would cut a group is refused before any rank starts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import gguf
import msgspec
import numpy as np
import pytest
import torch

from actorllm import LLM, SamplingParams
from actorllm.demo import demo_tokenizer_path
from actorllm.models.config import CheckpointConfig
from actorllm.models.gguf.blocks import GROUP_SIZE, BlockWeight, repack
from actorllm.models.gguf.shards import check_gguf_split, rank_part
from actorllm.models.parallel import TensorParallelError
from actorllm.testing.random_gguf import random_blocks
from tests.helpers.gguf_checkpoints import write_gguf
from tests.helpers.ray_ranks import weight_bytes

T = gguf.GGMLQuantizationType


def _q8(rows: int, cols: int, seed: int = 0) -> BlockWeight:
    w = np.random.default_rng(seed).normal(0, 0.1, (rows, cols)).astype(np.float32)
    return repack(gguf.quants.quantize(w, T.Q8_0), T.Q8_0, rows, cols)


def _q4_0(rows: int, cols: int) -> BlockWeight:
    w = np.random.default_rng(1).normal(0, 0.1, (rows, cols)).astype(np.float32)
    return repack(gguf.quants.quantize(w, T.Q4_0), T.Q4_0, rows, cols)


def _dense(b: BlockWeight | torch.Tensor) -> torch.Tensor:
    assert isinstance(b, BlockWeight)
    return b.dequantize(0, b.rows)


@pytest.mark.parametrize("make", [_q8, _q4_0], ids=["8-bit", "4-bit"])
def test_a_piece_holds_the_weights_of_its_rows_and_columns(make: Any) -> None:
    b = make(6, 128)
    whole = _dense(b)
    assert torch.equal(_dense(b.narrow(0, 2, 3)), whole[2:5])
    cols = b.narrow(1, 64, 32)
    assert torch.equal(_dense(cols), whole[:, 64:96])
    assert cols.packed.untyped_storage().data_ptr() != b.packed.untyped_storage().data_ptr()
    with pytest.raises(ValueError, match="not whole groups of 32"):
        b.narrow(1, 16, 32)
    padded = _dense(b.pad_rows(2))
    assert torch.equal(padded[:6], whole) and not padded[6:].any()


@pytest.mark.parametrize("qtype", [T.Q2_K, T.Q3_K, T.Q5_K, T.Q4_1, T.Q5_0], ids=lambda t: t.name)
def test_the_new_layouts_split_at_their_groups(qtype: T) -> None:
    """A row-parallel cut of the repacked weight falls on its groups (16 for Q2_K / Q3_K,
    not the file's 256-value super-blocks), holding those columns' values."""
    rng = np.random.default_rng(0)
    if qtype.name.endswith("_K"):  # no K-quant quantizer in gguf: random valid blocks
        raw = random_blocks(4, 512, qtype, rng)
    else:
        raw = gguf.quants.quantize(rng.normal(0, 0.1, (4, 512)).astype(np.float32), qtype)
    b = repack(raw, qtype, 4, 512)
    group = GROUP_SIZE[qtype]
    whole = _dense(b)
    assert torch.equal(_dense(b.narrow(1, group, 2 * group)), whole[:, group : 3 * group])
    with pytest.raises(ValueError, match=f"not whole groups of {group}"):
        b.narrow(1, group // 2, group)


def _rank(cfg: CheckpointConfig, rank: int) -> CheckpointConfig:
    return msgspec.structs.replace(
        cfg, tp_rank=rank, tp_size=2, full_num_heads=4, full_num_kv_heads=1
    )


def test_rank_parts_cut_like_a_safetensors_checkpoint() -> None:
    cfg = CheckpointConfig.from_dict({
        "architectures": ["LlamaForCausalLM"], "vocab_size": 5, "hidden_size": 64,
        "intermediate_size": 128, "num_hidden_layers": 1, "num_attention_heads": 4,
        "num_key_value_heads": 1,
    })  # fmt: skip
    down, head, k = _q8(64, 128), _q8(5, 64, seed=2), _q8(16, 64, seed=3)
    for r in (0, 1):
        local = _rank(cfg, r)
        piece = rank_part(local, "model.layers.0.mlp.down_proj.weight", "t", down, (64, 64))
        assert torch.equal(_dense(piece), _dense(down)[:, 64 * r : 64 * (r + 1)])
        rows = rank_part(local, "lm_head.weight", "t", head, (3, 64))
        expect = torch.cat((_dense(head), torch.zeros(1, 64)))[3 * r : 3 * (r + 1)]
        assert torch.equal(_dense(rows), expect)  # the last rank's padding row is zero
        # One KV head, two ranks: both keep it whole.
        same = rank_part(local, "model.layers.0.self_attn.k_proj.weight", "t", k, (16, 64))
        assert torch.equal(_dense(same), _dense(k))
    cut = _rank(cfg, 0)
    with pytest.raises(TensorParallelError, match=r"GGUF tensor 'blk.0.ffn_down.weight'"):
        rank_part(cut, "model.layers.0.mlp.down_proj.weight", "blk.0.ffn_down.weight",
                  _q8(64, 64), (64, 32 - 16))  # fmt: skip


def test_a_split_that_cuts_a_group_is_refused_before_any_rank_starts(tmp_path: Path) -> None:
    _ref, path = write_gguf(tmp_path, "qwen3", qtype="Q8_0", intermediate_size=96)
    check_gguf_split(path, 1)
    with pytest.raises(TensorParallelError, match=r"'blk\.0\.ffn_down\.weight' \(Q8_0\) has 96"):
        check_gguf_split(path, 2)
    with pytest.raises(TensorParallelError, match="ffn_down"):
        LLM(str(path), tokenizer=str(demo_tokenizer_path()), tensor_parallel_size=2)


PROMPTS = [[5 + i for i in range(40)], [30, 31, 32], [7] * 9]
GREEDY = SamplingParams(max_tokens=10, temperature=0.0, ignore_eos=True)
ENGINE: dict[str, Any] = {"dtype": "float32", "block_size": 8, "max_num_batched_tokens": 32,
                          "max_model_len": 128, "kv_cache_memory_bytes": 8 * 2**20}  # fmt: skip


def _run(path: Path, tp: int) -> tuple[list[list[int]], list[int]]:
    with LLM(str(path), tokenizer=str(demo_tokenizer_path()), tensor_parallel_size=tp,
             **ENGINE) as llm:  # fmt: skip
        outs = llm.generate([{"prompt_token_ids": p} for p in PROMPTS], GREEDY, use_tqdm=False)
        held = llm.collective_rpc(weight_bytes)
    return [list(o.outputs[0].token_ids) for o in outs], held


CASES = [
    # Q4_K_M's mix (fused qkv of two layouts, q/k permuted over all heads before the cut),
    # an odd vocabulary (the last rank's head and embedding rows padded) in a Q6_K head and
    # a Q8_0 embedding (each rank's rows kept in their blocks).
    pytest.param("llama", dict(qtype="Q4_K", overrides={"v_proj": "Q6_K", "down_proj": "Q6_K"},
                               head_type="Q6_K", embed_type="Q8_0", vocab_size=251),
                 id="llama-Q4_K_M"),
    # Experts cut per expert, the shared expert and q/k/v biases; a tied Q8_0 head.
    pytest.param("qwen2_moe", dict(qtype="Q8_0", mlp_only_layers=[], moe_intermediate_size=64,
                                   shared_expert_intermediate_size=64), id="qwen2_moe-Q8_0"),
    # Q3_K_M's mix: o_proj's 4-bit groups of 16 and ffn_down's Q4_K cut between ranks, a
    # Q5_K (8-bit with offsets) v.
    pytest.param("qwen3", dict(qtype="Q3_K", overrides={"v_proj": "Q5_K", "down_proj": "Q4_K"},
                               head_type="Q6_K"), id="qwen3-Q3_K_M"),
]  # fmt: skip


# Float inputs: with int8 inputs (the default) each rank rounds its own inputs the same
# way, but the all-reduce sums the partial outputs in another order, and a later layer's
# rounding can turn that float difference into a different quantum.
@pytest.mark.usefixtures("float_inputs")
@pytest.mark.parametrize(("family", "kw"), CASES)
def test_tp2_gives_tp1_greedy_tokens_with_half_the_weights_per_rank(
    tmp_path: Path, family: str, kw: dict[str, Any]
) -> None:
    _ref, path = write_gguf(tmp_path, family, **kw)
    (tp2, held2), (tp1, held1) = _run(path, 2), _run(path, 1)
    assert tp2 == tp1
    assert len(held2) == 2 and all(b < 0.6 * held1[0] for b in held2), (held2, held1)
