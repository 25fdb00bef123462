"""``kv_cache_dtype`` (vLLM's --kv-cache-dtype) through the engine: an fp8 cache holds twice
the blocks of a bfloat16 one in the same bytes, runs a tiny model close to the unquantized
cache, and uses a checkpoint's per-layer k_scale / v_scale."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from actorllm import LLM, SamplingParams
from actorllm.demo import demo_tokenizer_path
from actorllm.engine.actors.startup import _build_on_worker, default_runner_factory
from actorllm.engine.config.engine_config import EngineConfig, EngineConfigError
from tests.helpers.models import make_tiny_checkpoint

K_SCALE, V_SCALE = 4.0, 2.0
PROMPT = "The quick brown fox jumps over the lazy dog and then runs far away into the forest"
# 8-token chunks: later chunks read the earlier ones' keys and values back from the cache
SMALL: dict[str, Any] = dict(
    dtype="float32", max_model_len=128, kv_cache_memory_bytes=2**20,
    max_num_batched_tokens=8, enable_prefix_caching=False,
)  # fmt: skip


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = make_tiny_checkpoint(
        tmp_path_factory.mktemp("qwen3"), "qwen3", vocab_size=4096, eos_token_id=0,
        max_position_embeddings=1024,
    )  # fmt: skip
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, path / f.name)
    return path


@pytest.fixture(scope="module")
def scaled(qwen3: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The same model with per-layer KV scales, as fp8 checkpoints carry them."""
    path = tmp_path_factory.mktemp("scaled") / "m"
    shutil.copytree(qwen3, path)
    weights = load_file(path / "model.safetensors")
    layers = {int(n.split(".")[2]) for n in weights if n.startswith("model.layers.")}
    for i in layers:
        weights[f"model.layers.{i}.self_attn.k_scale"] = torch.tensor(K_SCALE)
        weights[f"model.layers.{i}.self_attn.v_scale"] = torch.tensor(V_SCALE)
    save_file(weights, str(path / "model.safetensors"), metadata={"format": "pt"})
    return path


def _blocks(model: Path, kv_cache_dtype: str) -> int:
    config = EngineConfig(
        model=str(model), device="cpu", dtype="float32", max_model_len=64,
        kv_cache_memory_bytes=2**20, kv_cache_dtype=kv_cache_dtype,
    )  # fmt: skip
    runner, _ = _build_on_worker(config, default_runner_factory)
    return int(runner.num_blocks)  # type: ignore[attr-defined]


def test_fp8_doubles_the_blocks_of_the_same_bytes(qwen3: Path) -> None:
    bf16, fp8, e5m2 = (_blocks(qwen3, d) for d in ("bfloat16", "fp8", "fp8_e5m2"))
    assert fp8 == e5m2 == 2 * bf16 and _blocks(qwen3, "auto") * 2 == bf16  # float32 model


def _run(model: Path, kv_cache_dtype: str) -> tuple[list[float], float]:
    """Prompt logprobs (prefill, chunked) and the sum of |stored keys| afterwards."""
    with LLM(str(model), kv_cache_dtype=kv_cache_dtype, **SMALL) as llm:
        params = SamplingParams(temperature=0.0, max_tokens=4, prompt_logprobs=0)
        (out,) = llm.generate([PROMPT], params, use_tqdm=False)
        assert out.prompt_logprobs is not None
        logprobs = [next(iter(p.values())).logprob for p in out.prompt_logprobs[1:]]

        def stored(worker: Any) -> float:
            caches = worker.model_runner.kv_caches
            return float(sum(k.float().abs().sum() for k, _ in caches))

        (keys,) = llm.collective_rpc(stored)
        (scales,) = llm.collective_rpc(
            lambda w: sorted({(m.k_scale, m.v_scale) for m in w.get_model().modules()
                              if hasattr(m, "k_scale")})
        )  # fmt: skip
        assert kv_cache_dtype == "auto" or scales == [_scales(model)]
    return logprobs, keys


def _scales(model: Path) -> tuple[float, float]:
    return (K_SCALE, V_SCALE) if model.parent.name.startswith("scaled") else (1.0, 1.0)


def _error(got: list[float], want: list[float]) -> tuple[float, float]:
    """(largest, mean) absolute difference of two runs' prompt logprobs."""
    diffs = [abs(a - b) for a, b in zip(got, want, strict=True)]
    return max(diffs), sum(diffs) / len(diffs)


# fp8's rounding of a tiny random model's large keys (largest, mean), measured: e4m3 0.34 /
# 0.13, e5m2 0.74 / 0.19 (a bfloat16 cache: 0.017 / 0.007); reading with scale 1 what was
# written with the checkpoint's scales is off by more than twice these.
TOLERANCE = {"fp8": (0.5, 0.2), "fp8_e5m2": (1.0, 0.3)}


@pytest.mark.parametrize("kv_cache_dtype", ["fp8", "fp8_e5m2"])
def test_fp8_cache_logprobs_stay_close_to_the_model_dtype_cache(
    qwen3: Path, scaled: Path, kv_cache_dtype: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Prompt logprobs through an fp8 cache within fp8's rounding of the float32 cache's;
    with the checkpoint's scales too, while the stored keys are divided by k_scale; and a
    read that ignores the scales is caught."""
    want, _ = _run(qwen3, "auto")
    got, keys = _run(qwen3, kv_cache_dtype)
    got_scaled, keys_scaled = _run(scaled, kv_cache_dtype)
    top, mean = TOLERANCE[kv_cache_dtype]
    for run in (got, got_scaled):
        err = _error(run, want)
        assert err[0] < top and err[1] < mean, err
    assert keys_scaled == pytest.approx(keys / K_SCALE, rel=0.1)
    from actorllm.kernels import paged_decode, paged_prefill

    unscaled = paged_decode.kv_tables
    for mod in (paged_decode, paged_prefill):  # the native kernels widen without the scales
        monkeypatch.setattr(mod, "kv_tables", lambda cache, s: unscaled(cache, (1.0, 1.0)))
    wrong, _ = _run(scaled, kv_cache_dtype)
    err = _error(wrong, want)
    assert err[0] > 2 * top and err[1] > 2 * mean, err


@pytest.mark.parametrize(
    ("value", "words"),
    [("fp8_inc", "Gaudi"), ("fp8_ds_mla", "MLA"), ("int8", "must be one of")],
)
def test_other_kv_cache_dtypes_are_refused_by_name(value: str, words: str) -> None:
    with pytest.raises(EngineConfigError, match="kv_cache_dtype") as err:
        EngineConfig(kv_cache_dtype=value)
    assert words in str(err.value) and err.value.param == "kv_cache_dtype"


def test_a_draft_model_drafts_from_its_own_fp8_cache(qwen3: Path) -> None:
    """method draft_model with the target as its draft, both caches fp8 (the draft's sized
    with the target's blocks): the greedy tokens of the fp8 run without speculation."""
    params = SamplingParams(temperature=0.0, max_tokens=12)
    prompts = [PROMPT, "Once upon a time"]
    kw = {**SMALL, "kv_cache_dtype": "fp8", "max_num_batched_tokens": 64}
    with LLM(str(qwen3), **kw) as llm:
        want = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
    spec = {"method": "draft_model", "model": str(qwen3), "num_speculative_tokens": 3}
    with LLM(str(qwen3), speculative_config=spec, **kw) as llm:
        got = [o.outputs[0].token_ids for o in llm.generate(prompts, params, use_tqdm=False)]
        (dtypes,) = llm.collective_rpc(
            lambda w: {t.dtype for pair in w.model_runner.proposer.kv_caches for t in pair}
        )
    assert got == want and dtypes == {torch.float8_e4m3fn}
