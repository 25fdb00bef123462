"""Quantized checkpoints in their exact on-disk layouts (tests/helpers/quant_checkpoints.py)
run through the model runner against a reference holding the dequantized weights."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import torch

from actorllm.kernels import amx_int8_linear, w8a8_vnni
from actorllm.models.quant.linear import Int8Linear, PackedLinear
from actorllm.models.quant.packed import tiled_kernel
from tests.helpers.models import hf_logprobs, load_hf_model
from tests.helpers.quant_checkpoints import write_quantized
from tests.models.test_family_parity import run_greedy

# W8A8 quantizes activations too: its logprobs stay this close to the reference's (measured
# 0.18 on this model); a 1.5x error in one scale tensor moves them by over 2.
W8A8_TOL = 0.5
# W4A8 (4-bit weights' default: int8 inputs per row and group): measured 0.10 (GPTQ) and
# 0.12 (AWQ) here; a 1.5x error in one scale tensor moves them by over 1.1.
W4A8_TOL = 0.4


def _tokens(path: Path) -> list[list[int]]:
    return [r.outputs for r in run_greedy(path).reqs.values()]


WEIGHT_ONLY = [
    ("gptq", dict(bits=4, desc_act=True)),  # asymmetric, activation order (g_idx)
    ("gptq", dict(bits=8, sym=True, group_size=-1)),
    ("gptq", dict(bits=4, sym=True, family="llama")),
    ("awq", dict()),
    ("w4a16", dict()),  # compressed-tensors pack-quantized
    ("fp8", dict()),  # per-tensor scales
    ("fp8", dict(block=(32, 32))),  # block scales (weight_scale_inv)
    ("ct_fp8", dict()),  # compressed-tensors FP8_DYNAMIC (activations stay unrounded)
    ("gptq", dict(bits=4, lm_head=True)),  # the LM head quantized too (lm_head: true)
    ("awq", dict(lm_head=True)),
]


@pytest.mark.usefixtures("float_inputs")
@pytest.mark.parametrize(
    ("method", "kw"), WEIGHT_ONLY, ids=[f"{m}-{sorted(k.items())}" for m, k in WEIGHT_ONLY]
)
def test_weight_only_greedy_tokens_equal_the_dequantized_reference(
    tmp_path: Path, method: str, kw: dict[str, Any]
) -> None:
    ref, quant = write_quantized(tmp_path, method, **kw)
    assert _tokens(quant) == _tokens(ref)


# The families served since SmolLM3 whose checkpoints are not fused (GLM's are refused):
# Arcee's un-gated up_proj, ERNIE 4.5's biases, NoPE layers, OLMo 3's whole-projection norms.
NEWER = [("gptq", "arcee"), ("awq", "arcee"), ("gptq", "ernie4_5"), ("awq", "smollm3"),
         ("gptq", "exaone4"), ("awq", "olmo3"), ("gptq", "seed_oss"),
         ("gptq", "starcoder2"), ("awq", "stablelm"), ("gptq", "apertus"),
         ("awq", "cohere"), ("gptq", "opt"), ("awq", "phi"), ("gptq", "gpt_neox"),
         ("awq", "gptj"), ("gptq", "gpt_bigcode"), ("awq", "gpt_bigcode_mha"),
         ("gptq", "gpt2"), ("gptq", "falcon"), ("awq", "falcon_new"),
         ("gptq", "phimoe")]  # fmt: skip


@pytest.mark.slow
@pytest.mark.usefixtures("float_inputs")
@pytest.mark.parametrize(("method", "family"), NEWER, ids=[f"{m}-{f}" for m, f in NEWER])
def test_newer_families_greedy_tokens_equal_the_dequantized_reference(
    tmp_path: Path, method: str, family: str
) -> None:
    ref, quant = write_quantized(tmp_path, method, family=family)
    assert _tokens(quant) == _tokens(ref)


NEOX_HEADS = [("gptq", "embed_out"), ("gptq", "lm_head"), ("awq", "embed_out")]


@pytest.mark.usefixtures("float_inputs")
@pytest.mark.parametrize(("method", "head"), NEOX_HEADS, ids=[f"{m}-{h}" for m, h in NEOX_HEADS])
def test_a_gpt_neox_head_quantized_under_either_name(
    tmp_path: Path, method: str, head: str
) -> None:
    """Pythia's GPTQ / AWQ checkpoints quantize the head under its checkpoint name,
    ``embed_out`` (GPTQ's module list, read from the tensors, names it so); ``lm_head``
    is read too. The head is stored quantized only: a float head would not load."""
    from safetensors.torch import load_file, save_file

    ref, quant = write_quantized(tmp_path, method, family="gpt_neox", lm_head=True)
    tensors = load_file(str(quant / "model.safetensors"))
    assert "embed_out.qweight" in tensors and "embed_out.weight" not in tensors
    if head != "embed_out":
        renamed = {head + k.removeprefix("embed_out") if k.startswith("embed_out.") else k: v
                   for k, v in tensors.items()}  # fmt: skip
        save_file(renamed, str(quant / "model.safetensors"))
    assert _tokens(quant) == _tokens(ref)


@pytest.mark.usefixtures("float_inputs")
def test_a_wrong_scale_changes_the_tokens(tmp_path: Path) -> None:
    """The comparison above can fail: one GPTQ scale tensor off by 2x shows."""
    ref, quant = write_quantized(tmp_path, "gptq", bits=4, scale_error=2.0)
    assert _tokens(quant) != _tokens(ref)


def _loaded(path: Path) -> Any:
    """A float32 model runner of ``path`` with its model loaded."""
    from actorllm.worker.model_runner import ModelRunner

    runner = ModelRunner(path, dtype="float32", max_model_len=64)
    runner.load_model()
    assert runner.model is not None
    return runner


def test_weights_stay_packed_in_memory(tmp_path: Path) -> None:
    ref, quant = write_quantized(tmp_path, "gptq", bits=4)
    sizes = {}
    for name, path in (("ref", ref), ("quant", quant)):
        runner = _loaded(path)
        sizes[name] = runner.weight_bytes
        model = runner.model
    linears = [m for m in model.modules() if isinstance(m, PackedLinear)]
    assert len(linears) == 8  # qkv, o, gate_up, down in each of 2 layers
    weights = sum(m.in_features * m.out_features for m in linears)
    # float32 -> 4 bits plus float32 scales and zeros per group of 32: 4 + 0.5 + 0.25 bytes
    # fewer per weight in memory, counted by the runner.
    saved = sizes["ref"] - sizes["quant"]
    assert saved >= weights * (4 - 0.5 - 0.25 - 0.01), (sizes, weights)
    for m in linears:
        assert m.w_packed.dtype == torch.uint8
        assert m.w_packed.numel() == m.in_features * m.out_features // 2
        assert not [n for n, _ in m.named_parameters() if n != "bias"]  # no disk layout left


def _logprob_error(tmp_path: Path, method: str, scale_error: float, **kw: Any) -> float:
    """The largest distance between the quantized model's greedy tokens' logprobs and
    transformers' over the dequantized weights."""
    ref, quant = write_quantized(tmp_path, method, scale_error=scale_error, **kw)
    hf = load_hf_model(ref)
    worst = 0.0
    for r in run_greedy(quant).reqs.values():
        lp = hf_logprobs(hf, r.prompt + r.outputs)  # [L, V] of the dequantized reference
        p = len(r.prompt)
        for i, tok in enumerate(r.outputs):
            worst = max(worst, abs(r.logprobs[i].logprobs[0] - lp[p + i - 1, tok].item()))
    return worst


@pytest.mark.usefixtures("float_inputs")
def test_a_quantized_lm_heads_own_scales_are_read(tmp_path: Path) -> None:
    """The lm_head cases above could fail: the head's logprobs are the dequantized
    reference's, and with its scales stored 2x off (greedy tokens unchanged: every logit
    doubles) they are not."""
    kw: dict[str, Any] = dict(bits=4, lm_head=True, wrong_module="lm_head")
    assert _logprob_error(tmp_path / "right", "gptq", 1.0, **kw) < 1e-3
    assert _logprob_error(tmp_path / "wrong", "gptq", 2.0, **kw) > 0.1


def test_w8a8_int8_logprobs_are_close_to_the_reference(tmp_path: Path) -> None:
    assert _logprob_error(tmp_path / "right", "w8a8", 1.0) < W8A8_TOL
    # The same check fails for a checkpoint with one scale tensor 1.5x off.
    assert _logprob_error(tmp_path / "wrong", "w8a8", 1.5) > W8A8_TOL


W4A8_CASES = [
    ("gptq", dict(bits=4, desc_act=True)),
    ("awq", {}),
    # Groups of 64: the AMX-INT8 tile kernel's weights where the host has the tiles.
    ("gptq", dict(bits=4, desc_act=True, group_size=64)),
    ("awq", dict(group_size=64)),
    ("gptq", dict(bits=4, lm_head=True)),  # the LM head on the same kernels
]


@pytest.mark.parametrize(("method", "kw"), W4A8_CASES)
def test_w4a8_logprobs_are_close_to_the_reference(
    tmp_path: Path, method: str, kw: dict[str, Any]
) -> None:
    """4-bit weights by default multiply int8-rounded inputs (VLLM_CPU_INT4_W4A8)."""
    right = _logprob_error(tmp_path / "right", method, 1.0, **kw)
    wrong = _logprob_error(tmp_path / "wrong", method, 1.5, **kw)
    assert right < W4A8_TOL < wrong


def test_w4a8_weights_take_the_tile_layout_where_a_kernel_reads_it(tmp_path: Path) -> None:
    """Same bytes, in the tile kernel's order where it runs; the rows a fallback
    dequantizes are the checkpoint's either way."""
    ref, quant = write_quantized(tmp_path, "awq", group_size=64)
    linears = dict(_loaded(quant).model.named_modules())
    reference = dict(_loaded(ref).model.named_modules())
    packed = [(n, m) for n, m in linears.items() if isinstance(m, PackedLinear)]
    assert len(packed) == 8
    for name, m in packed:
        assert m.tiled == (tiled_kernel() is not None)
        assert m.w_packed.numel() == m.in_features * m.out_features // 2
        w = reference[name].weight  # [O, I]
        torch.testing.assert_close(m.dequantized(5, 37), w[5:37], rtol=1e-6, atol=1e-6)


def test_w8a8_runs_int8_linears(tmp_path: Path) -> None:
    from actorllm.worker.model_runner import ModelRunner

    _ref, quant = write_quantized(tmp_path, "w8a8")
    runner = ModelRunner(quant, dtype="float32", max_model_len=64)
    runner.load_model()
    assert runner.model is not None
    linears = [m for m in runner.model.modules() if isinstance(m, Int8Linear)]
    assert len(linears) == 8 and all(m.int8_weight().dtype == torch.int8 for m in linears)
    # stored for the VNNI kernel where it, and not the AMX tiles, runs W8A8 here
    vnni = w8a8_vnni.available() and not amx_int8_linear.available()
    assert all(m.tiled == vnni for m in linears)


@pytest.mark.parametrize("method", ["gptq", "awq", "w4a16", "w8a8", "fp8"])
def test_dummy_weights_in_packed_layouts_run(tmp_path: Path, method: str) -> None:
    """load_format=dummy with a quantized config.json (benchmarks): random packed weights."""
    _ref, quant = write_quantized(tmp_path, method, block=(32, 32) if method == "fp8" else None)
    driver = run_greedy(quant, load_format="dummy")
    assert all(len(r.outputs) > 0 for r in driver.reqs.values())


@pytest.mark.usefixtures("float_inputs")
def test_gptq_layers_left_in_float_are_found_from_the_dtypes(tmp_path: Path) -> None:
    """A GPTQ checkpoint that stored some linears in float and lists none of them in
    ``modules_in_block_to_quantize`` (GPTQModel, AutoRound) loads as vLLM 0.32 loads it:
    the quantized modules are the ones with non-float tensors."""
    import json

    from safetensors.torch import load_file, save_file

    from actorllm.models.config import CheckpointConfig

    ref, quant = write_quantized(tmp_path, "gptq", bits=4)
    float_module = "model.layers.0.self_attn.o_proj"
    tensors = load_file(str(quant / "model.safetensors"))
    tensors = {k: v for k, v in tensors.items() if not k.startswith(float_module + ".")}
    # the dequantized reference's weight: the model stays the reference's
    tensors[f"{float_module}.weight"] = load_file(str(ref / "model.safetensors"))[
        f"{float_module}.weight"
    ]
    save_file(tensors, str(quant / "model.safetensors"))
    assert (
        "modules_in_block_to_quantize"
        not in json.loads((quant / "config.json").read_text())["quantization_config"]
    )
    found = CheckpointConfig.from_pretrained(quant).quantization_config
    assert found is not None
    listed = found["modules_in_block_to_quantize"]
    assert float_module not in listed and "model.layers.0.self_attn.q_proj" in listed
    assert _tokens(quant) == _tokens(ref)
