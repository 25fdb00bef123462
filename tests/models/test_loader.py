"""Weight loading: sharded and single-file safetensors, tied heads, dtypes, dummy weights,
and the typed errors for missing files, missing tensors and unknown architectures."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from actorllm.kernels.ops import BackendUnavailableError, get_ops, resolve_backend
from actorllm.models.config import CheckpointConfig
from actorllm.models.loader import (
    MissingCheckpointError,
    MissingWeightsError,
    load_model,
    safetensors_files,
)
from actorllm.models.registry import UnsupportedArchitectureError, supported_architectures
from tests.helpers.models import make_tiny_checkpoint


@pytest.fixture(scope="module")
def qwen2(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("q2"), "qwen2")


def _load(path: Path, **kw: object) -> torch.nn.Module:
    return load_model(path, CheckpointConfig.from_pretrained(path), progress=False, **kw)  # type: ignore[arg-type]


def _same_params(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    pa, pb = dict(a.named_parameters()), dict(b.named_parameters())
    return pa.keys() == pb.keys() and all(torch.equal(pa[k], pb[k]) for k in pa)


def test_packs_qkv_and_gate_up_with_bias(qwen2: Path) -> None:
    model = _load(qwen2)
    hf = load_file(str(qwen2 / "model.safetensors"))
    attn = model.model.layers[1].self_attn  # type: ignore[union-attr, index]
    pre = "model.layers.1.self_attn."
    expected_w = torch.cat([hf[pre + f"{x}_proj.weight"] for x in "qkv"])
    expected_b = torch.cat([hf[pre + f"{x}_proj.bias"] for x in "qkv"])
    assert torch.equal(attn.qkv_proj.weight, expected_w)
    assert torch.equal(attn.qkv_proj.bias, expected_b)
    mlp = model.model.layers[1].mlp  # type: ignore[union-attr, index]
    gate_up = torch.cat(
        [hf["model.layers.1.mlp.gate_proj.weight"], hf["model.layers.1.mlp.up_proj.weight"]]
    )
    assert torch.equal(mlp.gate_up_proj.weight, gate_up)


def test_sharded_checkpoint_loads_the_same_weights(tmp_path: Path, qwen2: Path) -> None:
    sharded = make_tiny_checkpoint(tmp_path, "qwen2", max_shard_size="40KB")
    assert (sharded / "model.safetensors.index.json").is_file()
    assert len(safetensors_files(sharded)) > 1
    assert _same_params(_load(sharded), _load(qwen2))


def test_tied_embeddings_share_one_tensor(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(tmp_path, "llama", tie_word_embeddings=True)
    assert "lm_head.weight" not in load_file(str(path / "model.safetensors"))
    model = _load(path)
    assert model.lm_head.weight is model.model.embed_tokens.weight  # type: ignore[union-attr]


def test_absent_lm_head_falls_back_to_the_embedding(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(tmp_path, "llama")
    tensors = load_file(str(path / "model.safetensors"))
    del tensors["lm_head.weight"]
    save_file(tensors, str(path / "model.safetensors"))
    model = _load(path)
    assert torch.equal(model.lm_head.weight, tensors["model.embed_tokens.weight"])  # type: ignore[union-attr, arg-type]


def test_forced_dtype(qwen2: Path) -> None:
    model = _load(qwen2, dtype="bfloat16")
    assert {p.dtype for p in model.parameters()} == {torch.bfloat16}
    assert _load(qwen2).lm_head.weight.dtype == torch.float32  # type: ignore[union-attr]  # "auto": config


def test_dummy_weights_need_no_files_and_follow_the_seed(tmp_path: Path, qwen2: Path) -> None:
    (tmp_path / "config.json").write_text((qwen2 / "config.json").read_text())
    a = _load(tmp_path, load_format="dummy", seed=1)
    b = _load(tmp_path, load_format="dummy", seed=1)
    c = _load(tmp_path, load_format="dummy", seed=2)
    assert _same_params(a, b)
    assert not _same_params(a, c)
    assert all(torch.isfinite(p).all() for p in a.parameters())


def test_missing_tensor_is_named(tmp_path: Path) -> None:
    path = make_tiny_checkpoint(tmp_path, "llama")
    tensors = load_file(str(path / "model.safetensors"))
    del tensors["model.layers.1.self_attn.k_proj.weight"]
    save_file(tensors, str(path / "model.safetensors"))
    with pytest.raises(MissingWeightsError, match=r"model\.layers\.1\.self_attn\.k_proj\.weight"):
        _load(path)


def test_missing_files(tmp_path: Path, qwen2: Path) -> None:
    (tmp_path / "config.json").write_text((qwen2 / "config.json").read_text())
    with pytest.raises(MissingCheckpointError):
        _load(tmp_path)
    index = {"weight_map": {"model.embed_tokens.weight": "model-00001-of-00002.safetensors"}}
    (tmp_path / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(MissingCheckpointError, match="00001"):
        _load(tmp_path)


def test_unknown_architecture_names_the_supported_ones(tmp_path: Path, qwen2: Path) -> None:
    raw = json.loads((qwen2 / "config.json").read_text())
    raw["architectures"] = ["BertForMaskedLM"]
    (tmp_path / "config.json").write_text(json.dumps(raw))
    with pytest.raises(UnsupportedArchitectureError) as e:
        _load(tmp_path, load_format="dummy")
    assert "BertForMaskedLM" in str(e.value)
    assert all(a in str(e.value) for a in supported_architectures())
    assert "Qwen3ForCausalLM" in supported_architectures()


def test_ops_dispatch() -> None:
    assert get_ops("torch").name == "torch"
    assert resolve_backend("auto", "cpu") == "torch"
    assert resolve_backend("auto", "cuda") == "triton"
    with pytest.raises(ValueError, match="attention_backend"):
        get_ops("flash")
    try:  # the Triton package is written separately: it either provides every op or says so
        ops = get_ops("triton")
    except BackendUnavailableError as e:
        assert "triton" in str(e)
    else:
        assert ops.name == "triton" and callable(ops.paged_attention)
