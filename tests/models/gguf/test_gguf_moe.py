"""GGUF MoE files (Qwen3-MoE, Mixtral as llama + expert_count, Qwen2-MoE with its shared
expert) written with the ``gguf`` package load with every expert kept in its blocks and
give the tokens (and HF's logprobs) of the reference holding the dequantized weights;
what is not run is refused by name."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from actorllm.models.config import CheckpointConfig
from actorllm.models.gguf.blocks import BlockWeight
from actorllm.models.gguf.config import NORM_TOPK, GGUFError
from actorllm.models.gguf.experts import GGUFExperts
from actorllm.models.gguf.linear import GGUFLinear
from actorllm.models.moe import SparseMoeBlock
from actorllm.models.quant.experts import quantized_experts
from tests.helpers.gguf_checkpoints import rewrite_gguf, write_gguf
from tests.helpers.models import load_hf_model
from tests.models.gguf.test_gguf_load import assert_equals_dequantized_reference, greedy_tokens

# Qwen2-MoE as llama.cpp runs it: every layer sparse (no mlp_only_layers), and its shared
# expert a whole number of 32-value blocks wide.
QWEN2_MOE = dict(mlp_only_layers=[], shared_expert_intermediate_size=64)
CASES: list[tuple[str, dict[str, Any]]] = [
    ("qwen3_moe", dict(qtype="Q8_0")),
    ("mixtral", dict(qtype="Q4_0")),  # arch llama: q/k permuted, top-k renormalised
    ("qwen2_moe", dict(qtype="Q8_0", **QWEN2_MOE)),  # top-k not renormalised
    # K-quants: experts 256 wide (whole super-blocks), Q4_K gate/up beside Q6_K down is not
    # expressible per expert here, so all experts Q4_K and the dense linears Q6_K.
    ("qwen3_moe", dict(qtype="Q6_K", overrides={"experts": "Q4_K"}, moe_intermediate_size=256)),
    # Q3_K experts (4-bit groups of 16) beside Q5_K dense linears; Q5_1 experts (8-bit
    # with offsets) in Mixtral.
    ("qwen3_moe", dict(qtype="Q5_K", overrides={"experts": "Q3_K"}, moe_intermediate_size=256)),
    ("mixtral", dict(qtype="Q4_1", overrides={"experts": "Q5_1"})),
    # F16 experts (float parts); the routers (shared_expert_gate too) quantized: read as
    # their dequantized floats.
    (
        "qwen2_moe",
        dict(qtype="Q4_0", overrides={"experts": "F16"}, router_type="Q8_0", **QWEN2_MOE),
    ),
]


@pytest.mark.usefixtures("float_inputs")
@pytest.mark.parametrize(
    ("family", "kw"),
    CASES,
    ids=[f"{f}-{k.get('overrides', {}).get('experts', k['qtype'])}" for f, k in CASES],
)
def test_greedy_tokens_equal_the_dequantized_reference(
    tmp_path: Path, family: str, kw: dict[str, Any]
) -> None:
    assert_equals_dequantized_reference(tmp_path, family, kw)


def test_routing_other_than_llama_cpp_would_show(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The comparison can fail: Qwen3-MoE's top-k weights left unnormalised change tokens."""
    ref, path = write_gguf(tmp_path, "qwen3_moe", qtype="Q8_0")
    monkeypatch.setitem(NORM_TOPK, "qwen3moe", False)
    assert greedy_tokens(path) != greedy_tokens(ref)


def test_experts_stay_in_their_blocks(tmp_path: Path) -> None:
    from actorllm.worker.model_runner import ModelRunner

    ref, path = write_gguf(tmp_path, "mixtral", qtype="Q4_0")
    runner = ModelRunner(path, dtype="float32", max_model_len=64)
    runner.load_model()
    model = runner.model
    assert model is not None
    blocks = [m for m in model.modules() if isinstance(m, SparseMoeBlock)]
    assert len(blocks) == 2
    for block in blocks:
        assert isinstance(block.experts, GGUFExperts)
        assert isinstance(block.gate, nn.Linear)  # the router stays float
        assert block.gate.weight.dtype == torch.float32
    experts = [m for b in blocks for m in b.experts.modules() if isinstance(m, GGUFLinear)]
    assert len(experts) == 2 * 4 * 2  # layers x experts x (gate_up, down)
    assert all(isinstance(p, BlockWeight) and p.qtype == "Q4_0" for m in experts for p in m.parts)
    weights = sum(m.in_features * m.out_features for m in experts)
    held = sum(b.numel() * b.element_size() for m in experts for b in m.buffers())
    assert held <= 0.76 * weights  # Q4_0: 0.75 bytes a weight (float32 scale and offset)
    floats = 4 * sum(p.numel() for p in load_hf_model(ref).parameters())
    assert runner.weight_bytes < 0.3 * floats
    assert quantized_experts(model)  # never captured in CUDA graphs


@pytest.fixture(scope="module")
def moe_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_gguf(tmp_path_factory.mktemp("gguf_moe"), "qwen3_moe", qtype="Q8_0")[1]


def test_config_follows_llama_cpp(moe_file: Path, tmp_path: Path) -> None:
    cfg = CheckpointConfig.from_pretrained(moe_file)
    assert (cfg.architecture, cfg.num_experts, cfg.num_experts_per_tok) == (
        "Qwen3MoeForCausalLM", 6, 2,
    )  # fmt: skip
    assert (cfg.moe_intermediate_size, cfg.norm_topk_prob) == (32, True)
    off = rewrite_gguf(moe_file, tmp_path / "off.gguf", keys={"qwen3moe.expert_weights_norm": 0})
    assert not CheckpointConfig.from_pretrained(off).norm_topk_prob


@pytest.mark.parametrize(
    ("change", "match"),
    [
        (dict(keys={"qwen3moe.expert_gating_func": 2}), r"expert_gating_func=2 is not supported"),
        (dict(drop="qwen3moe.expert_count"), r"qwen3moe\.expert_count=None, tensors \[.blk"),
        (dict(drop="qwen3moe.expert_feed_forward_length"), "expert_feed_forward_length"),
        (dict(arch="deepseek2"), "GGUF architecture 'deepseek2' is not supported"),
    ],
    ids=["sigmoid-gating", "no-expert-count", "no-expert-width", "arch"],
)
def test_what_is_not_run_is_refused_by_name(
    moe_file: Path, tmp_path: Path, change: dict[str, Any], match: str
) -> None:
    path = rewrite_gguf(moe_file, tmp_path / "x.gguf", **change)
    with pytest.raises(GGUFError, match=match):
        CheckpointConfig.from_pretrained(path)
