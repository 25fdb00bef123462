"""Every quantization_config runs or is refused at start by name; so is --quantization."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest
import torch

from actorllm.models.config import CheckpointConfig
from actorllm.models.loader import WeightLoadError
from actorllm.models.quant.apply import checkpoint_quantization
from actorllm.models.quant.spec import QuantizationError, resolve_quantization
from actorllm.worker.model_runner import ModelRunner
from tests.helpers.quant_checkpoints import write_quantized

GPTQ = {"quant_method": "gptq", "bits": 4, "group_size": 32, "desc_act": False, "sym": True}


@pytest.fixture(scope="module")
def gptq(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return write_quantized(tmp_path_factory.mktemp("gptq"), "gptq", bits=4)[1]


def _with_config(src: Path, dst: Path, qc: dict[str, Any] | None) -> Path:
    dst.mkdir()
    (dst / "model.safetensors").symlink_to(src / "model.safetensors")
    cfg = json.loads((src / "config.json").read_text())
    cfg.pop("quantization_config", None)
    if qc is not None:
        cfg["quantization_config"] = qc
    (dst / "config.json").write_text(json.dumps(cfg))
    return dst


def test_int8_weights_without_a_quantization_config_are_refused(tmp_path: Path) -> None:
    """The silent failure: int8 weights read as plain numbers. Now refused by name."""
    _ref, w8a8 = write_quantized(tmp_path, "w8a8")
    bare = _with_config(w8a8, tmp_path / "bare", None)
    runner = ModelRunner(bare, dtype="float32", max_model_len=64)
    with pytest.raises(
        WeightLoadError,
        match=r"_proj\.weight: a torch\.int8 checkpoint tensor cannot fill a torch\.float32",
    ):
        runner.load_model()


@pytest.mark.parametrize(
    ("qc", "named"),
    [
        ({"quant_method": "bitsandbytes"}, "quantization method 'bitsandbytes'"),
        ({"quant_method": "fp8", "activation_scheme": "static"}, "activation_scheme='static'"),
        (GPTQ | {"bits": 3}, r"'gptq': bits=3"),
        (GPTQ | {"group_size": 48}, r"'gptq': group_size=48"),
        (
            {
                "quant_method": "awq",
                "bits": 4,
                "group_size": 32,
                "version": "gemv",
                "zero_point": True,
            },
            "version='gemv'",
        ),
    ],
)
def test_what_is_not_run_is_refused_at_start_by_name(
    tmp_path: Path, gptq: Path, qc: dict[str, Any], named: str
) -> None:
    path = _with_config(gptq, tmp_path / "ckpt", qc)
    with pytest.raises(QuantizationError, match=named):
        ModelRunner(path, dtype="float32", max_model_len=64)


@pytest.mark.parametrize("method", ["gptq", "awq"])
def test_a_quantized_lm_head_tied_to_the_embedding_is_refused(tmp_path: Path, method: str) -> None:
    _ref, quant = write_quantized(tmp_path, method, lm_head=True)
    cfg = json.loads((quant / "config.json").read_text())
    (quant / "config.json").write_text(json.dumps(cfg | {"tie_word_embeddings": True}))
    with pytest.raises(QuantizationError, match=r"quantized lm_head .*tie_word_embeddings"):
        ModelRunner(quant, dtype="float32", max_model_len=64)


def test_lm_head_true_over_a_float_head(tmp_path: Path, gptq: Path) -> None:
    """The config says the head is quantized, the file holds a float ``lm_head.weight``.
    GPTQ reads which modules are quantized from the tensors' dtypes (as vLLM): the head
    stays float. AWQ has no such reading: the float tensor is refused by name."""
    path = _with_config(gptq, tmp_path / "ckpt", GPTQ | {"lm_head": True})
    runner = ModelRunner(path, dtype="float32", max_model_len=64)
    runner.load_model()
    assert runner.model is not None and isinstance(runner.model.lm_head, torch.nn.Linear)
    _ref, awq = write_quantized(tmp_path / "awq", "awq")
    qc = json.loads((awq / "config.json").read_text())["quantization_config"]
    path = _with_config(awq, tmp_path / "awq_head", qc | {"lm_head": True})
    runner = ModelRunner(path, dtype="float32", max_model_len=64)
    with pytest.raises(WeightLoadError, match=r"lm_head\.weight"):
        runner.load_model()


def test_compressed_tensors_schemes_not_run_are_named() -> None:
    acts = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "tensor",
            "dynamic": False}  # fmt: skip
    weights = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}
    raw = {"quant_method": "compressed-tensors", "format": "int-quantized",
           "config_groups": {"g": {"targets": ["Linear"], "weights": weights,
                                   "input_activations": acts}}}  # fmt: skip
    with pytest.raises(QuantizationError, match=r"strategy='tensor', dynamic=False"):
        resolve_quantization(raw, None)
    fp8 = dict(raw, config_groups={"g": {"targets": ["Linear"], "weights": weights | {
        "type": "float"}, "input_activations": None}})  # fmt: skip
    with pytest.raises(QuantizationError, match="the fp8 scheme"):
        resolve_quantization(fp8, None)  # weight-only fp8 without format float-quantized
    with pytest.raises(QuantizationError, match="kv_cache_scheme"):
        resolve_quantization(raw | {"kv_cache_scheme": {"num_bits": 8}}, None)


def test_quantization_argument_must_match_the_checkpoint(gptq: Path) -> None:
    for alias in ("gptq", "gptq_marlin", "auto_gptq", "none", None):
        ModelRunner(gptq, dtype="float32", max_model_len=64, quantization=alias)
    with pytest.raises(QuantizationError, match=r"model config \(gptq\) does not match .* \(awq\)"):
        ModelRunner(gptq, dtype="float32", max_model_len=64, quantization="awq")
    with pytest.raises(QuantizationError, match="Unknown quantization method: int3"):
        ModelRunner(gptq, dtype="float32", max_model_len=64, quantization="int3")


def test_quantization_argument_on_an_unquantized_checkpoint_is_refused(tmp_path: Path) -> None:
    ref, _quant = write_quantized(tmp_path, "gptq")
    with pytest.raises(QuantizationError, match="quantization='fp8': the checkpoint has no"):
        ModelRunner(ref, dtype="float32", max_model_len=64, quantization="fp8")


def test_tensor_parallel_over_quantized_weights_runs_or_is_refused_by_name(
    gptq: Path,
) -> None:
    """Quantized linears and MoE experts split over ranks (tests/models/quant/
    test_shards.py, tests/distributed/test_tensor_parallel.py), GGUF files too
    (tests/models/gguf/test_gguf_shards.py); gpt-oss's mxfp4 experts are not split."""
    cfg = msgspec.structs.replace(CheckpointConfig.from_pretrained(gptq), tp_size=2)
    moe = msgspec.structs.replace(cfg, num_experts=4)
    gguf = msgspec.structs.replace(moe, quantization_config={"quant_method": "gguf"})
    for split in (cfg, moe, gguf):
        assert checkpoint_quantization(split, None) is not None
    mxfp4 = msgspec.structs.replace(
        moe, model_type="gpt_oss", quantization_config={"quant_method": "mxfp4"}
    )
    with pytest.raises(QuantizationError, match="'mxfp4' is not supported with tensor_parallel"):
        checkpoint_quantization(mxfp4, None)


def test_quantize_config_json_is_read(tmp_path: Path, gptq: Path) -> None:
    """AutoGPTQ's own quantize_config.json (no quantization_config in config.json)."""
    path = _with_config(gptq, tmp_path / "old", None)
    qc = {k: v for k, v in GPTQ.items() if k != "quant_method"}
    (path / "quantize_config.json").write_text(json.dumps(qc))
    spec = checkpoint_quantization(CheckpointConfig.from_pretrained(path), None)
    assert spec is not None and spec.method == "gptq" and spec.group_size == 32


def test_a_misaligned_tensor_parallel_split_is_refused_before_spawning_ranks(
    tmp_path: Path,
) -> None:
    """down_proj's 64 inputs are one GPTQ group of 64: two ranks would cut it."""
    from actorllm.models.parallel import TensorParallelError
    from actorllm.worker.startup import RankSpec, build_rank0

    def never() -> Any:
        raise AssertionError("no runner may be built")

    _ref, quant = write_quantized(tmp_path, "gptq", group_size=64, intermediate_size=64)
    spec = RankSpec(model=str(quant), device="cpu", world_size=2)
    named = r"tensor_parallel_size=2: model\.layers\.0\.mlp\.down_proj \(gptq\) .* group_size 64"
    with pytest.raises(TensorParallelError, match=named):
        build_rank0(spec, never)


def test_an_fp8_per_tensor_kv_cache_scheme_is_accepted_and_others_are_named() -> None:
    """compressed-tensors' kv_cache_scheme: fp8 static per-tensor scales (read for an fp8
    KV cache, models/kv_scales.py) start, with or without quantized linears."""
    kv = {"num_bits": 8, "type": "float", "strategy": "tensor", "dynamic": False,
          "symmetric": True}  # fmt: skip
    only_kv = {"quant_method": "compressed-tensors", "kv_cache_scheme": kv}
    assert resolve_quantization(only_kv, None) is None  # the linears are not quantized
    weights = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "channel"}
    acts = {"num_bits": 8, "type": "int", "symmetric": True, "strategy": "token",
            "dynamic": True}  # fmt: skip
    w8a8 = only_kv | {"format": "int-quantized", "config_groups": {"g": {
        "targets": ["Linear"], "weights": weights, "input_activations": acts}}}  # fmt: skip
    spec = resolve_quantization(w8a8, None)
    assert spec is not None and spec.scheme == "w8a8_int8"
    for bad in ({"strategy": "channel"}, {"type": "int"}, {"dynamic": True}):
        with pytest.raises(QuantizationError, match="kv_cache_scheme="):
            resolve_quantization(only_kv | {"kv_cache_scheme": kv | bad}, None)


def test_awq_modules_to_not_convert_match_substrings_as_vllm() -> None:
    """AutoAWQ skips a module whose name contains an entry, and vLLM reads the list so:
    ["self_attn"] leaves every attention projection in floats (suffix matching made
    such a checkpoint fail at load: `...self_attn.k_proj.weight: no such parameter`)."""
    awq = {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True,
           "version": "gemm", "modules_to_not_convert": ["self_attn"]}  # fmt: skip
    spec = resolve_quantization(awq, None)
    assert spec is not None
    assert not spec.quantizes("model.layers.0.self_attn.q_proj")
    assert spec.quantizes("model.layers.0.mlp.down_proj")


def test_gptq_modules_in_block_to_quantize_match_substrings_as_vllm() -> None:
    """vLLM's is_layer_gptq_quantized: an entry names every module it is a substring of,
    full names ("model.layers.0.self_attn.q_proj") and short ones ("mlp") alike."""
    spec = resolve_quantization(
        GPTQ | {"modules_in_block_to_quantize": [["model.layers.0.self_attn.q_proj"], ["mlp"]]},
        None,
    )
    assert spec is not None
    assert spec.quantizes("model.layers.0.self_attn.q_proj")
    assert spec.quantizes("model.layers.1.mlp.up_proj")
    assert not spec.quantizes("model.layers.1.self_attn.q_proj")


def test_gpt_neox_head_is_read_under_either_name() -> None:
    """GPT-NeoX's head is ``embed_out`` in its checkpoints (``lm_head`` as transformers 5
    names it): a list naming it either way (GPTQ's modules_in_block_to_quantize, AWQ's
    modules_to_not_convert, compressed-tensors' ignore) applies to it."""
    from actorllm.models.quant.apply import head_names

    heads = head_names("gpt_neox")
    assert heads == ("embed_out", "lm_head") and head_names("llama") == ("lm_head",)
    for name in heads:
        only = resolve_quantization(
            GPTQ | {"lm_head": True, "modules_in_block_to_quantize": [["mlp"], [name]]}, None
        )
        assert only is not None and only.quantizes_head(heads)
        awq = {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True,
               "version": "gemm", "modules_to_not_convert": [name], "lm_head": True}  # fmt: skip
        skipped = resolve_quantization(awq, None)
        assert skipped is not None and not skipped.quantizes_head(heads)
    listed = resolve_quantization(
        GPTQ | {"lm_head": True, "modules_in_block_to_quantize": [["mlp"]]}, None
    )
    assert listed is not None and not listed.quantizes_head(heads)


def test_fused_or_conv1d_checkpoints_are_refused_quantized_except_from_gguf(gptq: Path) -> None:
    """Phi-3's checkpoints store qkv_proj / gate_up_proj fused and GPT-2's are Conv1D, which
    the packed layouts are not built from (GPTQ's packer transposes Conv1D: GPT-2 runs
    from it); a GGUF file's tensors are the converter's linear rows, read whole
    (models/gguf/load.py)."""
    cfg = CheckpointConfig.from_pretrained(gptq)
    awq = {"quant_method": "awq", "bits": 4, "group_size": 32, "zero_point": True,
           "version": "gemm"}  # fmt: skip
    for changed, words in (
        ({"model_type": "phi3"}, "Phi-3's fused qkv_proj / gate_up_proj"),
        ({"model_type": "gpt2", "quantization_config": awq}, "GPT-2's Conv1D weights"),
    ):
        other = msgspec.structs.replace(cfg, **changed)
        with pytest.raises(QuantizationError, match=words):
            checkpoint_quantization(other, None)
        gguf = msgspec.structs.replace(other, quantization_config={"quant_method": "gguf"})
        assert checkpoint_quantization(gguf, None) is not None
    assert checkpoint_quantization(msgspec.structs.replace(cfg, model_type="gpt2"), None)
