"""ModelRunner lifecycle: ordering errors, sleep levels 1 and 2, dummy weights, sizing."""

from __future__ import annotations

from pathlib import Path

import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import CachedRequestData, SchedulerOutput
from actorllm.worker.model_runner import ModelRunner, ModelRunnerStateError
from actorllm.worker.step_inputs import SchedulerProtocolError
from tests.helpers.models import make_tiny_checkpoint
from tests.helpers.sched_driver import SchedDriver

GREEDY = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("m"), "llama")


def _runner(path: Path, **kw: object) -> ModelRunner:
    r = ModelRunner(path, dtype="float32", block_size=4, max_num_seqs=4, max_model_len=32, **kw)  # type: ignore[arg-type]
    r.load_model()
    r.initialize_kv_cache(24)
    return r


def _generate(runner: ModelRunner, prompt: list[int], rid: str = "x") -> list[int]:
    d = SchedDriver(runner, token_budget=16)
    d.add(rid, prompt, GREEDY)
    d.run()
    return d.outputs[rid]


def test_kv_cache_sizing(ckpt: Path) -> None:
    r = ModelRunner(ckpt, dtype="bfloat16", block_size=16)
    cfg = r.model_config
    assert (
        r.kv_cache_bytes_per_block()
        == 2 * cfg.num_layers * 16 * cfg.num_kv_heads * cfg.head_dim * 2
    )
    assert r.max_model_len == cfg.max_position_embeddings
    with pytest.raises(ValueError, match="max_model_len"):
        ModelRunner(ckpt, max_model_len=cfg.max_position_embeddings + 1)


def test_execute_out_of_order_raises(ckpt: Path) -> None:
    r = ModelRunner(ckpt, dtype="float32", block_size=4, max_model_len=32)
    with pytest.raises(ModelRunnerStateError, match="load_model"):
        r.execute(SchedulerOutput.empty(0))
    r.load_model()
    with pytest.raises(ModelRunnerStateError, match="initialize_kv_cache"):
        r.execute(SchedulerOutput.empty(0))


def test_unknown_cached_request_is_a_protocol_error(ckpt: Path) -> None:
    r = _runner(ckpt)
    so = SchedulerOutput(
        step_id=0,
        scheduled_new_reqs=[],
        scheduled_cached_reqs=[
            CachedRequestData(req_id="ghost", new_block_ids=([],), num_computed_tokens=3)
        ],
        num_scheduled_tokens={"ghost": 1},
        total_num_scheduled_tokens=1,
    )
    with pytest.raises(SchedulerProtocolError, match="ghost"):
        r.execute(so)


@pytest.mark.parametrize("level", [1, 2])
def test_sleep_and_wake_up(ckpt: Path, level: int) -> None:
    r = _runner(ckpt)
    prompt = [5, 9, 17, 33, 2, 8, 70]
    before = _generate(r, prompt, "a")
    r.sleep(level)
    assert r.kv_caches == []
    assert (r.model is None) == (level == 2)
    with pytest.raises(ModelRunnerStateError, match="asleep"):
        r.execute(SchedulerOutput.empty(1))
    r.wake_up()
    assert len(r.kv_caches) == r.model_config.num_layers
    assert r.kv_caches[0][0].shape[0] == 24
    assert _generate(r, prompt, "b") == before


def test_sleep_level_is_validated(ckpt: Path) -> None:
    r = _runner(ckpt)
    with pytest.raises(ValueError, match="level"):
        r.sleep(3)
    with pytest.raises(ValueError, match="only the KV cache can sleep alone"):
        r.sleep(1, ["weights"])


def test_the_kv_cache_sleeps_alone(ckpt: Path) -> None:
    # vLLM's release_kv_cache_memory: the cache freed, the weights where they were
    r = _runner(ckpt)
    prompt = [5, 9, 17, 33, 2, 8, 70]
    before = _generate(r, prompt, "a")
    model = r.model
    r.sleep(1, ["kv_cache"])
    assert r.kv_caches == [] and r.model is model
    with pytest.raises(ModelRunnerStateError, match="asleep"):
        r.execute(SchedulerOutput.empty(1))
    r.wake_up(["weights"])  # nothing of theirs slept: still without a cache
    assert r.sleep_level and r.kv_caches == []
    r.wake_up(["kv_cache"])
    assert not r.sleep_level and len(r.kv_caches) == r.model_config.num_layers
    assert _generate(r, prompt, "b") == before


def test_dummy_weights_run(ckpt: Path) -> None:
    r = _runner(ckpt, load_format="dummy", seed=3)
    out = _generate(r, [1, 2, 3, 4, 5])
    assert len(out) == 5 and all(0 <= t < r.model_config.vocab_size for t in out)


def test_profile_run_and_engine_options(ckpt: Path) -> None:
    r = ModelRunner(ckpt, dtype="float32", block_size=4, max_model_len=32, enforce_eager=True)
    r.load_model()
    assert r.profile_run() == 9 * r.kv_cache_bytes_per_block()  # 8 blocks for 32 tokens + null
    with pytest.raises(ModelRunnerStateError, match="CUDA"):
        r.profile_num_blocks(0.9)


def test_reset_requests_forgets_held_requests(ckpt: Path) -> None:
    r = _runner(ckpt)
    d = SchedDriver(r, token_budget=16)
    d.add("a", [3, 4, 5], GREEDY)
    d.step()
    assert "a" in r.input_batch.req_id_to_index
    r.reset_requests()
    assert r.input_batch.req_id_to_index == {}
    with pytest.raises(SchedulerProtocolError, match="a"):
        d.step()  # the driver still thinks the worker holds "a"


@pytest.mark.parametrize("enabled", [True, False])
def test_weights_on_huge_pages_follows_its_switch(
    ckpt: Path, enabled: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    from actorllm.worker import model_load

    seen: list[object] = []
    monkeypatch.setattr(model_load, "model_on_huge_pages", seen.append)
    r = ModelRunner(
        ckpt, dtype="float32", block_size=4, max_model_len=32, weights_on_huge_pages=enabled
    )
    r.load_model()
    assert seen == ([r.model] if enabled else [])
