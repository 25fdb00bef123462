"""Engine start-up: what the loaded model tells the scheduler (here: its sliding window),
and an engine serving a sliding-window model end to end."""

from __future__ import annotations

import logging
import shutil
from pathlib import Path

import anyio
import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.demo import demo_tokenizer_path
from actorllm.engine import AsyncEngine
from actorllm.engine.actors.startup import (
    _build_on_worker,
    build_scheduler_config,
    default_runner_factory,
)
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.testing.engine_harness import check_invariants
from tests.helpers.models import make_tiny_checkpoint


@pytest.mark.parametrize(
    ("family", "groups", "hybrid"),
    [
        ("mistral", (8,), True),
        ("gemma2", (None, 8), True),
        ("gemma2", (None,), False),
        ("llama", (None,), True),
    ],
)
def test_the_scheduler_gets_the_kv_cache_groups(
    tmp_path: Path, family: str, groups: tuple[int | None, ...], hybrid: bool
) -> None:
    """Mistral (every layer sliding): one windowed group. Gemma 2 mixes full layers: a full
    and a sliding group, or one full group with disable_hybrid_kv_cache_manager."""
    path = make_tiny_checkpoint(tmp_path / family, family, sliding_window=8)  # type: ignore[arg-type]
    config = EngineConfig(
        model=str(path), max_model_len=64, kv_cache_memory_bytes=2**20,
        disable_hybrid_kv_cache_manager=not hybrid,
    )  # fmt: skip
    _, info = _build_on_worker(config, default_runner_factory)
    assert info.kv_group_windows == groups
    sched = build_scheduler_config(config, info)
    assert sched.group_windows == groups
    assert sched.sliding_window == (groups[0] if len(groups) == 1 else None)


def _served(path: Path) -> str:
    """A checkpoint directory with the demo tokenizer beside it, for the engine."""
    for f in demo_tokenizer_path().iterdir():
        shutil.copy(f, path / f.name)
    return str(path)


def _tiny(tmp_path: Path, family: str) -> str:
    return _served(
        make_tiny_checkpoint(
            tmp_path / family, family, vocab_size=4096, eos_token_id=0,  # type: ignore[arg-type]
            sliding_window=8, max_position_embeddings=256,
        )
    )  # fmt: skip


async def _generate_all(eng: AsyncEngine, prompts: tuple[str, ...], max_tokens: int) -> dict:  # type: ignore[type-arg]
    """Greedy tokens of every prompt, all in flight at once; then the engine's invariants."""
    greedy = SamplingParams(temperature=0.0, max_tokens=max_tokens, ignore_eos=True)
    outs: dict[str, list[int]] = {}

    async def one(prompt: str) -> None:
        last = None
        async for out in eng.generate(prompt, greedy):
            last = out
        assert last is not None
        outs[prompt] = list(last.outputs[0].token_ids)

    async with anyio.create_task_group() as tg:
        for prompt in prompts:
            tg.start_soon(one, prompt)
    await check_invariants(eng)
    return outs


PROMPTS = ("The quick brown fox", "Hello there", "Sliding windows")


@pytest.mark.anyio
async def test_engine_serves_past_the_window_in_a_pool_smaller_than_one_request(
    tmp_path: Path,
) -> None:
    """24 usable blocks of 4 (96 positions) serve 3 requests of 100+ tokens at once: only
    the window (and the chunk being written) stays allocated."""
    async with AsyncEngine.open(
        _tiny(tmp_path, "mistral"), max_model_len=256, block_size=4,
        num_gpu_blocks_override=25, max_num_batched_tokens=16,
    ) as eng:  # fmt: skip
        outs = await _generate_all(eng, PROMPTS, 90)
    assert len(outs) == 3 and all(len(o) == 90 for o in outs.values())


@pytest.mark.anyio
async def test_engine_serves_a_hybrid_model_with_and_without_hybrid_tables(
    tmp_path: Path,
) -> None:
    """Gemma 2 end to end: the same greedy tokens whether sliding layers get their own
    block table or share the full layers' one, and no block is left held."""
    path = _tiny(tmp_path, "gemma2")
    results = []
    for disable in (False, True):
        async with AsyncEngine.open(
            path, max_model_len=256, block_size=4, max_num_batched_tokens=16,
            disable_hybrid_kv_cache_manager=disable,
        ) as eng:  # fmt: skip
            results.append(await _generate_all(eng, PROMPTS, 40))
    assert results[0] == results[1] and all(len(o) == 40 for o in results[0].values())


@pytest.mark.anyio
async def test_a_kv_connector_on_a_hybrid_model_is_refused_at_start(tmp_path: Path) -> None:
    """A connector keys blocks by one table: refused before any actor starts, naming the
    flags, instead of a scheduler that crashes on every restart."""
    path = _tiny(tmp_path, "gemma2")
    with pytest.raises(ValueError, match=r"kv_connector.*disable-hybrid-kv-cache-manager"):
        async with AsyncEngine.open(path, max_model_len=64, block_size=4, kv_connector="offload"):
            pass
    async with AsyncEngine.open(
        path, max_model_len=64, block_size=4, kv_connector="offload",
        disable_hybrid_kv_cache_manager=True,
    ) as eng:  # fmt: skip
        outs = await _generate_all(eng, PROMPTS[:1], 4)
    assert all(len(o) == 4 for o in outs.values())


@pytest.mark.anyio
async def test_a_passed_tokenizer_gets_the_configured_chat_template() -> None:
    """``chat_template`` is honoured for a tokenizer the caller passes too, on a copy: the
    caller's object keeps its own template."""
    from transformers import AutoTokenizer

    from actorllm.engine.actors.startup import build_tokenizer

    tok = AutoTokenizer.from_pretrained(str(demo_tokenizer_path()))
    own = tok.chat_template
    template = "{% for m in messages %}<<{{ m['content'] }}>>{% endfor %}"
    got = await build_tokenizer(EngineConfig(model="demo", chat_template=template), tok)
    assert got.chat_template == template
    assert tok.chat_template == own
    assert got.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "<<hi>>"
    assert await build_tokenizer(EngineConfig(model="demo"), tok) is tok


def test_the_block_size_defaults_by_device_and_a_given_one_is_kept(tmp_path: Path) -> None:
    """No block_size: 32 on CPU (vLLM's CPU backend also takes multiples of 32), 16 on
    CUDA; the scheduler and the model runner get the same resolved size."""
    assert EngineConfig(device="cpu").resolved_block_size() == 32
    assert EngineConfig(device="cuda").resolved_block_size() == 16
    assert EngineConfig(device="cpu", block_size=16).resolved_block_size() == 16
    path = make_tiny_checkpoint(tmp_path / "llama", "llama")
    config = EngineConfig(
        model=str(path), device="cpu", max_model_len=64, kv_cache_memory_bytes=2**20
    )
    runner, info = _build_on_worker(config, default_runner_factory)
    assert runner.block_size == 32
    assert build_scheduler_config(config, info).block_size == 32


@pytest.mark.parametrize(
    ("algo", "core", "size"), [("sha256", "sha256", 32), ("xxhash", "xxh3_128", 16)]
)
def test_the_prefix_cache_hashes_with_the_algorithm_asked_for(
    tmp_path: Path, algo: str, core: str, size: int
) -> None:
    """vLLM's --prefix-caching-hash-algo (default sha256) reaches the scheduler's cache."""
    path = make_tiny_checkpoint(tmp_path / "llama", "llama")
    config = EngineConfig(
        model=str(path), max_model_len=64, kv_cache_memory_bytes=2**20,
        prefix_caching_hash_algo=algo,  # type: ignore[arg-type]
    )  # fmt: skip
    _, info = _build_on_worker(config, default_runner_factory)
    sched = build_scheduler_config(config, info)
    assert sched.prefix_caching_hash_algo == core
    from actorllm.core.scheduler import Scheduler

    assert len(Scheduler(sched).kv_cache_manager.block_hasher.none_hash) == size
    assert EngineConfig().prefix_caching_hash_algo == "sha256"


def test_the_step_budget_defaults_by_device_and_chunking(tmp_path: Path) -> None:
    """No max_num_batched_tokens: with chunked prefill 1024 on CPU (compute-bound prefill:
    a smaller step gives first tokens sooner) and 2048 on CUDA; without chunking the whole
    context, at least 2048; a given one is kept. The scheduler gets the resolved budget."""
    assert EngineConfig(device="cpu").resolved_max_num_batched_tokens(4096) == 1024
    assert EngineConfig(device="cuda").resolved_max_num_batched_tokens(4096) == 2048
    off = EngineConfig(device="cpu", enable_chunked_prefill=False)
    assert off.resolved_max_num_batched_tokens(4096) == 4096
    assert off.resolved_max_num_batched_tokens(512) == 2048
    given = EngineConfig(device="cpu", max_num_batched_tokens=3000)
    assert given.resolved_max_num_batched_tokens(4096) == 3000
    path = make_tiny_checkpoint(tmp_path / "llama", "llama")
    config = EngineConfig(
        model=str(path), device="cpu", max_model_len=64, kv_cache_memory_bytes=2**20
    )
    _, info = _build_on_worker(config, default_runner_factory)
    assert build_scheduler_config(config, info).max_num_batched_tokens == 1024


# -- the CPU KV cache's size -------------------------------------------------------------


@pytest.mark.anyio
async def test_a_long_context_model_starts_with_the_default_kv_cache(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """16 KiB a token (2 layers x 4 KV heads x head_dim 256, float32) and a 16384-token
    context: one request needs 512 blocks of 32 tokens (256 MiB) plus the null block, more
    than the old fixed 256 MiB (512 blocks). The default now holds min(max_num_seqs, 4)
    requests: one here, to keep the test's cache at 256.5 MiB."""
    path = _served(
        make_tiny_checkpoint(
            tmp_path / "long", "llama", vocab_size=4096, eos_token_id=0, num_kv_heads=4,
            head_dim=256, max_position_embeddings=16384,
        )
    )  # fmt: skip
    with caplog.at_level(logging.INFO, logger="actorllm.worker.startup"):
        async with AsyncEngine.open(path, device="cpu", dtype="float32", max_num_seqs=1) as eng:
            outs = await _generate_all(eng, PROMPTS[:1], 4)
            assert eng.max_model_len == 16384
            assert (await eng.get_stats()).num_gpu_blocks == 512  # the null block left out
    assert all(len(o) == 4 for o in outs.values())
    assert "Auto set the CPU KV cache to 256.5 MiB (513 blocks of 32 tokens): 1 request of" in (
        caplog.text
    )


def _short_of_memory(monkeypatch: pytest.MonkeyPatch, available: int) -> None:
    from actorllm.worker import startup
    from actorllm.worker.host_memory import HostMemory

    memory = HostMemory(available=available, mem_available=available, cgroup_headroom=None)
    monkeypatch.setattr(startup, "host_memory", lambda: memory)


@pytest.mark.anyio
async def test_memory_short_fails_at_start_naming_the_settings_and_what_fits(
    tiny_model: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The tiny Llama (512 bytes a token, 16 KiB blocks) with 256 KiB to spare: the cap,
    80 % of it, holds 12 blocks (11 usable, 352 tokens), not one 1024-token request. The
    error names the settings; the max_model_len it offers then starts."""
    _short_of_memory(monkeypatch, 256 * 2**10)
    with pytest.raises(ValueError) as err:
        async with AsyncEngine.open(tiny_model, device="cpu", dtype="float32"):
            pass
    text = str(err.value)
    for name in ("max_model_len=1024", "--max-model-len to 352 or less",
                 "--kv-cache-memory-bytes", "VLLM_CPU_KVCACHE_SPACE"):  # fmt: skip
        assert name in text, text
    async with AsyncEngine.open(
        tiny_model, device="cpu", dtype="float32", max_model_len=352
    ) as eng:
        assert (await eng.get_stats()).num_gpu_blocks == 11
        outs = await _generate_all(eng, PROMPTS[:1], 4)
    assert all(len(o) == 4 for o in outs.values())


def test_an_explicit_kv_cache_too_small_says_what_fits(tiny_model: str) -> None:
    """256 KiB holds 16 blocks of 16 KiB (15 usable, 480 tokens); 1024 tokens need 33."""
    from actorllm.worker.cpu_kv_size import KVCacheSizeError

    config = EngineConfig(
        model=tiny_model, device="cpu", dtype="float32", kv_cache_memory_bytes=2**18
    )
    with pytest.raises(KVCacheSizeError) as err:
        _build_on_worker(config, default_runner_factory)
    text = str(err.value)
    assert "--max-model-len to 480 or less" in text, text
    assert f"to {33 * 2**14} bytes" in text and "--kv-cache-memory-bytes" in text


@pytest.mark.anyio
async def test_a_tokenizer_given_as_a_path_is_loaded_from_it(tmp_path: Path) -> None:
    """``AsyncEngine.open(model, tokenizer=<str or Path>)`` means vLLM's tokenizer name or
    directory (``EngineConfig.tokenizer``), not an already loaded tokenizer."""
    path = make_tiny_checkpoint(tmp_path, "llama", vocab_size=4096, eos_token_id=0)
    async with AsyncEngine.open(
        path, tokenizer=demo_tokenizer_path(), max_model_len=64, block_size=4
    ) as eng:  # fmt: skip
        assert eng.config.tokenizer == str(demo_tokenizer_path())
        assert eng.tokenizer("hi")["input_ids"]
