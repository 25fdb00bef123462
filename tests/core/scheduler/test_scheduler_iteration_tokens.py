"""vLLM's iteration tokens per step (``EngineCoreOutputs.iteration_tokens``): the prompt
tokens a request computed, counted on the step its prefill ends, plus the tokens generated;
a step that produced no output reports none."""

from __future__ import annotations

from sched_helpers import FakeWorker, make_request

from actorllm.core.scheduler import Scheduler, SchedulerConfig


def sched(**kw: object) -> Scheduler:
    base: dict[str, object] = dict(
        max_num_seqs=8, max_num_batched_tokens=64, max_model_len=64, block_size=4, num_blocks=33
    )
    base.update(kw)
    return Scheduler(SchedulerConfig(**base))  # type: ignore[arg-type]


def _steps(s: Scheduler, w: FakeWorker, n: int) -> list[int]:
    out = []
    for _ in range(n):
        so = s.schedule()
        out.append(s.update_from_output(so, w.execute(so)).iteration_tokens)
    return out


def test_a_request_adds_its_prompt_and_each_generated_token() -> None:
    """As vLLM's test_metrics_counts expects: prompt + max_tokens over max_tokens steps."""
    s, w = sched(), FakeWorker(4)
    s.add_request(make_request("a", list(range(1, 10)), max_tokens=4, ignore_eos=True))
    assert _steps(s, w, 4) == [9 + 1, 1, 1, 1]


def test_a_chunked_prompt_counts_when_its_prefill_ends() -> None:
    s, w = sched(max_num_batched_tokens=4, enable_chunked_prefill=True), FakeWorker(4)
    s.add_request(make_request("a", list(range(1, 11)), max_tokens=2, ignore_eos=True))
    assert _steps(s, w, 4) == [0, 0, 10 + 1, 1]  # chunks 4, 4, 2, then one decode


def test_prefix_cache_hits_are_not_computed() -> None:
    s, w = sched(), FakeWorker(4)
    prompt = list(range(1, 14))  # 13 tokens: 3 full blocks of 4
    s.add_request(make_request("a", prompt, max_tokens=1))
    _steps(s, w, 1)
    s.add_request(make_request("b", prompt, max_tokens=1))
    assert _steps(s, w, 1) == [13 - 12 + 1]
