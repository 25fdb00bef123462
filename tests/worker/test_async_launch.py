"""Async scheduling on the device: step N+1 is launched before step N's tokens are read.

A hand-rolled decode loop schedules every running request one token per step with a
placeholder input (the scheduler does not know the token yet), exactly what the engine's
async scheduler sends. Launching step N+1 before resolving step N must give the same tokens
as launching and resolving one step at a time, including when a request finishes (rows
move while a token is still pending) and for a seeded random request.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler_output import CachedRequestData, NewRequestData, SchedulerOutput
from actorllm.worker.model_runner import ModelRunner, PendingStep
from tests.helpers.models import make_tiny_checkpoint

BS = 4
PROMPTS = {"a": [5, 9, 17, 33, 2], "b": [70, 3, 8], "c": [11, 12, 13, 14, 15, 16, 7]}
PARAMS = {
    "a": SamplingParams(temperature=0.0, max_tokens=2, ignore_eos=True),  # finishes first
    "b": SamplingParams(temperature=0.0, max_tokens=6, ignore_eos=True),
    "c": SamplingParams(temperature=1.0, seed=1234, max_tokens=6, ignore_eos=True),
}


@pytest.fixture(scope="module")
def ckpt(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("m"), "llama")


def _runner(path: Path, **kw: object) -> ModelRunner:
    r = ModelRunner(path, dtype="float32", block_size=BS, max_num_seqs=4, max_model_len=32, **kw)  # type: ignore[arg-type]
    r.load_model()
    r.initialize_kv_cache(24)
    return r


def _schedule(params: dict[str, SamplingParams] = PARAMS) -> list[SchedulerOutput]:
    """Step 0 prefills everything; step k decodes each request's k-th token, placeholder
    inputs only; a request is finished in the step after its last token was sampled."""
    blocks, nxt = {}, 1
    for r, p in PROMPTS.items():
        n = -(-(len(p) + 8) // BS)
        blocks[r], nxt = list(range(nxt, nxt + n)), nxt + n
    new = [
        NewRequestData(req_id=r, prompt_token_ids=p, output_token_ids=[],
                       sampling_params=params[r], block_ids=(blocks[r],), num_computed_tokens=0)
        for r, p in PROMPTS.items()
    ]  # fmt: skip
    steps = [
        SchedulerOutput(step_id=0, scheduled_new_reqs=new, scheduled_cached_reqs=[],
                        num_scheduled_tokens={r: len(p) for r, p in PROMPTS.items()},
                        total_num_scheduled_tokens=sum(map(len, PROMPTS.values())))
    ]  # fmt: skip
    for k in range(1, 6):
        live = [r for r in PROMPTS if params[r].max_tokens > k]  # type: ignore[operator]
        done = [r for r in PROMPTS if params[r].max_tokens == k]
        cached = [
            CachedRequestData(
                req_id=r, new_block_ids=([],), num_computed_tokens=len(PROMPTS[r]) + k - 1
            )
            for r in live
        ]
        steps.append(
            SchedulerOutput(step_id=k, scheduled_new_reqs=[], scheduled_cached_reqs=cached,
                            num_scheduled_tokens=dict.fromkeys(live, 1),
                            total_num_scheduled_tokens=len(live), finished_req_ids=done)
        )  # fmt: skip
    return steps


def _collect(outs: list, tokens: dict[str, list[int]]) -> dict[str, list[int]]:
    for out in outs:
        for r, t in zip(out.req_ids, out.sampled_token_ids, strict=True):
            tokens.setdefault(r, []).extend(t)
    return tokens


def _run_sync(r: ModelRunner, steps: list[SchedulerOutput]) -> dict[str, list[int]]:
    return _collect([r.execute(so) for so in steps], {})


def _run_async(r: ModelRunner, steps: list[SchedulerOutput]) -> dict[str, list[int]]:
    """Keep two steps in flight: launch N+1, then read N."""
    outs = []
    prev: PendingStep | None = None
    for so in steps:
        cur = r.launch(so)
        if prev is not None:
            outs.append(prev.result())
        prev = cur
    assert prev is not None
    outs.append(prev.result())
    return _collect(outs, {})


@pytest.fixture(scope="module")
def want(ckpt: Path) -> dict[str, list[int]]:
    """The synchronous path's tokens: launch and read one step at a time."""
    return _run_sync(_runner(ckpt), _schedule())


def test_double_submission_matches_sync(ckpt: Path, want: dict[str, list[int]]) -> None:
    steps = _schedule()
    assert {r: len(t) for r, t in want.items()} == {"a": 2, "b": 6, "c": 6}
    r = _runner(ckpt)
    got = _run_async(r, steps)
    assert got == want
    # Decode steps really took their inputs from the device buffer, not the host.
    assert r.launcher.token_feed.num_fills == len(steps) - 1
    # Every token ended on the host batch, nothing is left pending.
    assert not r.input_batch.num_pending.any()
    for rid in ("b", "c"):
        slot = r.input_batch.req_id_to_index[rid]
        assert r.input_batch.output_token_ids(slot).tolist() == want[rid]


def test_staged_inputs_on_cpu_match(ckpt: Path, want: dict[str, list[int]]) -> None:
    """The pinned-staging path (CUDA's) with CPU tensors: same tokens with two in flight."""
    steps = _schedule()
    r = _runner(ckpt, staged_inputs=True)
    assert r.launcher.buffers is not None
    assert _run_async(r, steps) == want
    assert r.launcher.buffers.steps == len(steps)


def test_penalties_resolve_pending_tokens_first(ckpt: Path) -> None:
    """A request whose sampling reads its output history cannot use a device-side token:
    the runner resolves the step in flight first and still gets the sync path's tokens."""
    params = {**PARAMS, "b": PARAMS["b"].clone(repetition_penalty=1.3, presence_penalty=0.5)}
    steps = _schedule(params)
    want = _run_sync(_runner(ckpt), steps)
    r = _runner(ckpt)
    assert _run_async(r, steps) == want
    assert r.launcher.token_feed.num_fills == 0  # every pending token was resolved instead


def test_results_resolve_in_launch_order(ckpt: Path) -> None:
    steps = _schedule()
    r = _runner(ckpt)
    p0, p1 = r.launch(steps[0]), r.launch(steps[1])
    out1 = p1.result()  # resolves step 0 first: its tokens must be appended before step 1's
    out0 = p0.result()
    assert (out0.step_id, out1.step_id) == (0, 1)
    slot = r.input_batch.req_id_to_index["b"]
    got = r.input_batch.output_token_ids(slot).tolist()
    assert got == [*out0.sampled_token_ids[out0.req_ids.index("b")],
                   *out1.sampled_token_ids[out1.req_ids.index("b")]]  # fmt: skip
