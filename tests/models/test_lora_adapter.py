"""Reading PEFT adapters onto our fused projections: q/k/v and gate/up slices land in their
columns; scaling is alpha/r (rsLoRA alpha/sqrt(r)); whatever we would not apply is refused
by name (a ValueError naming the adapter and the reason)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import torch

from actorllm.models.base import CausalLM
from actorllm.models.config import CheckpointConfig
from actorllm.models.loader import load_model
from actorllm.models.lora_adapter import LoRAAdapterError, read_adapter
from actorllm.models.lora_layers import attach_lora
from actorllm.models.parallel import shard_config
from tests.helpers.lora import make_adapter
from tests.helpers.models import make_tiny_checkpoint


def _model(path: Path) -> CausalLM:
    return load_model(path, CheckpointConfig.from_pretrained(path), dtype=torch.float32)


@pytest.fixture(scope="module")
def llama(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, CausalLM]:
    base = make_tiny_checkpoint(tmp_path_factory.mktemp("llama"), "llama")
    return base, _model(base)


@pytest.mark.parametrize("rslora", [False, True])
def test_slices_land_in_their_columns_with_peft_scaling(
    llama: tuple[Path, CausalLM], tmp_path: Path, rslora: bool
) -> None:
    import peft
    import transformers

    base, model = llama
    path = make_adapter(base, tmp_path / "a", r=4, alpha=8, use_rslora=rslora, seed=2)
    state = attach_lora(model, 2, 8, torch.float32)
    w = read_adapter("a", path, model, max_rank=8, dtype=torch.float32)
    assert w.scaling == (8 / 2 if rslora else 8 / 4)
    state.fill(1, w)
    hf = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    layer = peft.PeftModel.from_pretrained(hf, str(path)).base_model.model.model.layers[1]
    x = torch.randn(5, 64)
    rows = torch.tensor([0, 3])
    state.use([1, -1, -1, 1, -1])
    try:
        ours = model.model.layers[1].self_attn.qkv_proj(x)  # type: ignore[union-attr, index]
        mlp = model.model.layers[1].mlp(x)  # type: ignore[union-attr, index]
    finally:
        state.use(None)
    a = layer.self_attn
    ref = torch.cat([a.q_proj(x), a.k_proj(x), a.v_proj(x)], -1)
    plain = torch.cat([a.q_proj.base_layer(x), a.k_proj.base_layer(x), a.v_proj.base_layer(x)], -1)
    torch.testing.assert_close(ours[rows], ref[rows])
    torch.testing.assert_close(ours[[1, 2, 4]], plain[[1, 2, 4]])  # rows in no group: base
    torch.testing.assert_close(mlp[rows], layer.mlp(x)[rows])
    state.fill(1, None)


def test_a_bin_adapter_reads_as_its_safetensors_twin(
    llama: tuple[Path, CausalLM], tmp_path: Path
) -> None:
    base, model = llama
    st = make_adapter(base, tmp_path / "st", r=4, seed=5)
    pt = make_adapter(base, tmp_path / "pt", r=4, seed=5, safe_serialization=False)
    assert (pt / "adapter_model.bin").is_file() and not (pt / "adapter_model.safetensors").exists()
    a = read_adapter("st", st, model, max_rank=8, dtype=torch.float32)
    b = read_adapter("pt", pt, model, max_rank=8, dtype=torch.float32)
    assert a.modules.keys() == b.modules.keys() and a.scaling == b.scaling
    for target, slices in a.modules.items():
        for x, y in zip(slices, b.modules[target], strict=True):
            assert x.shard == y.shard
            assert torch.equal(x.a, y.a) and torch.equal(x.b, y.b), target


class _Payload:
    """A class instance: only full unpickling (code from the file) would build it."""


def test_a_bin_adapter_needing_full_unpickling_is_refused(
    llama: tuple[Path, CausalLM], tmp_path: Path
) -> None:
    base, model = llama
    pt = make_adapter(base, tmp_path / "pt", r=4, seed=5, safe_serialization=False)
    state = torch.load(pt / "adapter_model.bin", weights_only=True)
    torch.save({**state, "x": _Payload()}, pt / "adapter_model.bin")
    with pytest.raises(LoRAAdapterError, match=r"'bad'.*adapter_model\.bin.*weights_only=True"):
        read_adapter("bad", pt, model, max_rank=8, dtype=torch.float32)


def _edit_config(path: Path, **changes: object) -> Path:
    cfg = json.loads((path / "adapter_config.json").read_text())
    (path / "adapter_config.json").write_text(json.dumps({**cfg, **changes}))
    return path


def test_refusals_name_the_adapter_and_the_reason(
    llama: tuple[Path, CausalLM], tmp_path: Path
) -> None:
    base, model = llama
    good = make_adapter(base, tmp_path / "good", r=8, seed=3)
    cases: dict[str, tuple[Path, str]] = {
        # vLLM's phrases: its clients and tests match them
        "rank": (good, "LoRA rank 8 is greater than max_lora_rank=4"),
        "empty": (tmp_path, "not a PEFT adapter directory"),
        "dora": (
            _edit_config(make_adapter(base, tmp_path / "d", seed=3), use_dora=True),
            "does not yet support DoRA",
        ),
        "save": (
            _edit_config(make_adapter(base, tmp_path / "s", seed=3), modules_to_save=["lm_head"]),
            r"Unsupported modules_to_save: \['lm_head'\]",
        ),
        "pissa": (
            _edit_config(make_adapter(base, tmp_path / "p", seed=3), init_lora_weights="pissa"),
            "init_lora_weights='pissa' is not supported",
        ),
        "bias": (_edit_config(make_adapter(base, tmp_path / "b", seed=3), bias="all"), "bias"),
        "head": (make_adapter(base, tmp_path / "h", targets=["lm_head"], seed=3), "lm_head"),
        "embed": (
            make_adapter(base, tmp_path / "e", targets=["embed_tokens"], seed=3),
            "embed_tokens",
        ),
    }
    for name, (path, reason) in cases.items():
        max_rank = 4 if name == "rank" else 16
        with pytest.raises(LoRAAdapterError, match=reason) as info:
            read_adapter(name, path, model, max_rank=max_rank, dtype=torch.float32)
        assert str(info.value).startswith(f"LoRA adapter {name!r}: ")


def test_inits_that_only_set_the_first_weights_load(
    llama: tuple[Path, CausalLM], tmp_path: Path
) -> None:
    """gaussian (or true) leaves the base model as it is: a plain LoRA, served."""
    base, model = llama
    for init in ("gaussian", True):
        path = make_adapter(base, tmp_path / str(init), seed=3)
        _edit_config(path, init_lora_weights=init)
        assert read_adapter("g", path, model, max_rank=16, dtype=torch.float32).modules


def test_an_adapter_of_another_base_model_is_refused(
    llama: tuple[Path, CausalLM], tmp_path: Path
) -> None:
    _, model = llama
    other = make_tiny_checkpoint(tmp_path / "other", "llama", hidden_size=32, num_heads=2,
                                 num_kv_heads=1, intermediate_size=64)  # fmt: skip
    path = make_adapter(other, tmp_path / "a", seed=4)
    with pytest.raises(LoRAAdapterError, match="another base model"):
        read_adapter("x", path, model, max_rank=16, dtype=torch.float32)
    deeper = make_tiny_checkpoint(tmp_path / "deeper", "llama", num_layers=3)
    with pytest.raises(LoRAAdapterError, match=r"layers\.2\..*no such module"):
        read_adapter("y", make_adapter(deeper, tmp_path / "b", seed=4), model,
                     max_rank=16, dtype=torch.float32)  # fmt: skip


def test_moe_expert_adapters_are_refused(tmp_path: Path) -> None:
    base = make_tiny_checkpoint(tmp_path / "moe", "qwen3_moe")
    model = _model(base)
    path = make_adapter(base, tmp_path / "a", targets=["gate_proj", "up_proj"], seed=5)
    with pytest.raises(LoRAAdapterError, match="MoE expert adapters"):
        read_adapter("moe", path, model, max_rank=16, dtype=torch.float32)


def test_phi3_fused_qkv_adapter_is_split_over_the_slices(tmp_path: Path) -> None:
    """Phi-3's checkpoints fuse qkv_proj / gate_up_proj themselves: a PEFT adapter of the
    whole projection gives every slice its A and that slice's rows of B."""
    import peft
    import transformers

    base = make_tiny_checkpoint(tmp_path / "phi3", "phi3")
    model = _model(base)
    path = make_adapter(base, tmp_path / "a", targets=["qkv_proj", "gate_up_proj"], seed=6)
    state = attach_lora(model, 1, 16, torch.float32)
    state.fill(0, read_adapter("phi", path, model, max_rank=16, dtype=torch.float32))
    hf = transformers.AutoModelForCausalLM.from_pretrained(base, dtype=torch.float32)
    layer = peft.PeftModel.from_pretrained(hf, str(path)).base_model.model.model.layers[0]
    x = torch.randn(3, 64)
    state.use([0, 0, 0])
    ours = model.model.layers[0].self_attn.qkv_proj(x)  # type: ignore[union-attr, index]
    state.use(None)
    torch.testing.assert_close(ours, layer.self_attn.qkv_proj(x))


def _ranks(path: Path, size: int) -> list[CausalLM]:
    cfg = CheckpointConfig.from_pretrained(path)
    return [load_model(path, shard_config(cfg, r, size), dtype=torch.float32) for r in range(size)]


def test_tensor_parallel_ranks_hold_the_adapters_parts(tmp_path: Path) -> None:
    """Column-parallel q/k/v and gate/up: A whole, B's rows of the rank's outputs (the one
    KV head replicated on both ranks); row-parallel o/down: A's columns of the rank's
    inputs, B whole. The ranks' parts put together are the whole adapter."""
    base = make_tiny_checkpoint(tmp_path / "base", "qwen2", num_kv_heads=1)
    path = make_adapter(base, tmp_path / "a", r=4, seed=3)
    whole = read_adapter("a", path, _model(base), max_rank=8, dtype=torch.float32)
    parts = [read_adapter("a", path, m, max_rank=8, dtype=torch.float32) for m in _ranks(base, 2)]

    def sl(w: Any, module: str, shard: int | None) -> Any:
        return next(s for s in w.modules[f"model.layers.0.{module}"] if s.shard == shard)

    d = 16  # head_dim: hidden 64 / 4 heads
    q = [sl(p, "self_attn.qkv_proj", 0) for p in parts]
    torch.testing.assert_close(torch.cat([q[0].b, q[1].b]), sl(whole, "self_attn.qkv_proj", 0).b)
    assert q[0].b.shape == (2 * d, 4)
    for shard in (1, 2):  # k, v: the one KV head on both ranks
        full = sl(whole, "self_attn.qkv_proj", shard)
        for p in parts:
            torch.testing.assert_close(sl(p, "self_attn.qkv_proj", shard).b, full.b)
            torch.testing.assert_close(sl(p, "self_attn.qkv_proj", shard).a, full.a)
    up = [sl(p, "mlp.gate_up_proj", 1) for p in parts]
    torch.testing.assert_close(torch.cat([up[0].b, up[1].b]), sl(whole, "mlp.gate_up_proj", 1).b)
    torch.testing.assert_close(up[0].a, sl(whole, "mlp.gate_up_proj", 1).a)
    for module in ("self_attn.o_proj", "mlp.down_proj"):
        full, rows = sl(whole, module, None), [sl(p, module, None) for p in parts]
        torch.testing.assert_close(torch.cat([rows[0].a, rows[1].a], dim=1), full.a)
        torch.testing.assert_close(rows[1].b, full.b)
        # Each rank's partial delta, summed (the all-reduce), is the whole delta.
        x = torch.randn(3, full.a.shape[1])
        half = full.a.shape[1] // 2
        partial = [x[:, i * half : (i + 1) * half] @ r.a.T @ r.b.T for i, r in enumerate(rows)]
        torch.testing.assert_close(partial[0] + partial[1], x @ full.a.T @ full.b.T)


def test_tensor_parallel_ranks_refuse_another_models_adapter_by_its_whole_shape(
    tmp_path: Path,
) -> None:
    """Checked against the whole projection, not the rank's part: an adapter of a model
    twice as wide is refused on every rank."""
    base = make_tiny_checkpoint(tmp_path / "base", "llama")
    wide = make_tiny_checkpoint(tmp_path / "wide", "llama", intermediate_size=256)
    path = make_adapter(wide, tmp_path / "a", targets=("up_proj",), r=4)
    for model in _ranks(base, 2):
        with pytest.raises(LoRAAdapterError, match=r"\[128, 64\] projection"):
            read_adapter("a", path, model, max_rank=8, dtype=torch.float32)


def test_a_home_relative_path_is_expanded_as_vllm(
    llama: tuple[Path, CausalLM], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    base, model = llama
    make_adapter(base, tmp_path / "adapters" / "a", r=4, alpha=8, seed=2)
    monkeypatch.setenv("HOME", str(tmp_path))
    w = read_adapter("a", "~/adapters/a", model, max_rank=8, dtype=torch.float32)
    assert w.rank == 4
