"""Tiny models through ModelRunner: the Triton backend (interpreter on CPU) picks the same
greedy tokens as the torch backend, through chunked prefill and a prefix-cache hit, for a
Llama, a MoE (the fused-MoE kernel), Gemma 2 (sliding window and soft-capping) and gpt-oss
(attention sinks, sliding window, biased experts with the clamped SwiGLU)."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

from actorllm.core.sampling_params import SamplingParams
from actorllm.worker.model_runner import ModelRunner
from tests.helpers.models import make_tiny_checkpoint
from tests.helpers.sched_driver import SchedDriver
from tests.helpers.triton_devices import require_triton_device


def _greedy_tokens(
    path: Path, backend: str, device: str, kv_cache_dtype: str = "auto"
) -> dict[str, list[int]]:
    runner = ModelRunner(
        path, dtype="float32", device=device, attention_backend=backend,
        block_size=4, max_num_seqs=4, max_model_len=48, kv_cache_dtype=kv_cache_dtype,
    )  # fmt: skip
    assert runner.attention_backend == backend
    runner.load_model()
    runner.initialize_kv_cache(num_blocks=32)
    driver = SchedDriver(runner, token_budget=6)  # prompts prefill in chunks
    greedy = SamplingParams(temperature=0.0, max_tokens=4, ignore_eos=True)
    g = torch.Generator().manual_seed(3)
    vocab = runner.model_config.vocab_size
    base = torch.randint(3, vocab, (9,), generator=g).tolist()
    driver.add("a", base, greedy)
    driver.add("b", torch.randint(3, vocab, (3,), generator=g).tolist(), greedy)

    def on_step(d: SchedDriver) -> None:
        if d.step_id == 3:  # shares a's first two blocks: a prefix-cache hit
            d.add("c", [*base[:8], 5, 6], greedy)

    driver.run(on_step=on_step)
    return driver.outputs


@pytest.mark.slow
@pytest.mark.parametrize("family", ["llama", "qwen3_moe", "gemma2", "gpt_oss"])
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_triton_backend_matches_torch_greedy(tmp_path: Path, device: str, family: str) -> None:
    require_triton_device(device)
    small = dict(num_layers=2, hidden_size=32, intermediate_size=32, vocab_size=64)
    if family in ("qwen3_moe", "gpt_oss"):
        small["head_dim"] = 16
    if family == "gpt_oss":
        small["sliding_window"] = 4  # the prompts pass it
    path = make_tiny_checkpoint(tmp_path / family, family, num_heads=4, num_kv_heads=2, **small)  # type: ignore[arg-type]
    want = _greedy_tokens(path, "torch", device)
    got = _greedy_tokens(path, "triton", device)
    assert set(got) == {"a", "b", "c"} and all(len(v) == 4 for v in got.values())
    assert got == want


@pytest.mark.slow
@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=pytest.mark.cuda)])
def test_an_fp8_cache_gives_the_torch_backends_greedy_tokens(tmp_path: Path, device: str) -> None:
    """kv_cache_dtype fp8: both backends store the same bytes and read them in float32."""
    require_triton_device(device)
    small = dict(num_layers=2, hidden_size=32, intermediate_size=32, vocab_size=64)
    path = make_tiny_checkpoint(tmp_path / "llama", "llama", num_heads=4, num_kv_heads=2, **small)  # type: ignore[arg-type]
    want = _greedy_tokens(path, "torch", device, "fp8")
    got = _greedy_tokens(path, "triton", device, "fp8")
    assert set(got) == {"a", "b", "c"} and got == want
