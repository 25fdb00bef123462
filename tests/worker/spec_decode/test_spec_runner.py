"""Speculative decoding (ngram) through the real scheduler and model runner: greedy output
equals decoding without speculation, lookups that hit are accepted, seeded sampling is
unchanged, sampling features apply at every verified position, and no KV block leaks."""

from __future__ import annotations

from pathlib import Path

import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler import Scheduler
from actorllm.worker.model_runner import ModelRunner
from actorllm.worker.spec_decode.suffix import SuffixProposer, SuffixSettings
from tests.helpers.models import make_tiny_checkpoint
from tests.helpers.spec_sched import generate_with_drafts

BS, BLOCKS, MAX_LEN = 4, 64, 96


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("ckpt"), "qwen3", num_kv_heads=2)


def _runner(checkpoint: Path, k: int, draft: Path | None = None) -> ModelRunner:
    runner = ModelRunner(
        checkpoint, dtype="float32", block_size=BS, max_num_seqs=8, max_model_len=MAX_LEN,
        num_speculative_tokens=k, prompt_lookup_min=1, prompt_lookup_max=3,
        draft_model=None if draft is None else str(draft),
    )  # fmt: skip
    runner.load_model()
    runner.initialize_kv_cache(BLOCKS)
    return runner


def _generate(
    runner: ModelRunner, prompts: dict[str, list[int]], params: SamplingParams, **cfg: int
) -> tuple[dict[str, list[int]], Scheduler]:
    cfg.setdefault("num_blocks", BLOCKS)
    out, sched, _ = generate_with_drafts(
        runner, prompts, params, max_model_len=MAX_LEN, block_size=BS, **cfg
    )
    return out, sched


REPEATS = [5, 9, 17, 33, 5, 9, 17, 33, 5, 9, 17, 33, 5, 9]  # lookups hit
NO_REPEAT = [3, 14, 15, 92, 65, 35, 89, 79, 32, 38]  # lookups miss, at first


@pytest.fixture(scope="module")
def plain(checkpoint: Path) -> ModelRunner:
    return _runner(checkpoint, 0)


@pytest.fixture(scope="module")
def spec(checkpoint: Path) -> ModelRunner:
    return _runner(checkpoint, 4)


def test_greedy_equal_and_accepted(plain: ModelRunner, spec: ModelRunner) -> None:
    prompts = {"rep": REPEATS, "miss": NO_REPEAT}
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    want, _ = _generate(plain, prompts, params)
    got, sched = _generate(spec, prompts, params)
    assert got == want
    stats = sched.statistics()
    assert stats.spec_num_draft_tokens > 0
    assert stats.spec_num_accepted_tokens > 0  # a tiny random model loops: lookups hit
    assert stats.spec_num_accepted_tokens < stats.spec_num_draft_tokens  # and some miss
    assert stats.spec_accepted_per_pos[0] >= stats.spec_accepted_per_pos[-1]


def test_seeded_sampling_unchanged(plain: ModelRunner, spec: ModelRunner) -> None:
    prompts = {"rep": REPEATS, "miss": NO_REPEAT}
    params = SamplingParams(temperature=0.8, top_k=20, seed=7, max_tokens=30, ignore_eos=True)
    want, _ = _generate(plain, prompts, params)
    got, sched = _generate(spec, prompts, params)
    assert got == want
    assert sched.statistics().spec_num_draft_tokens > 0


@pytest.mark.parametrize(
    "extra",
    [
        {"repetition_penalty": 1.3, "frequency_penalty": 0.4, "presence_penalty": 0.2},
        {"bad_words_token_ids": [[9, 17], [33]]},
        {"min_tokens": 12, "logit_bias": {5: 2.0}},
        {"logprobs": 2},
    ],
    ids=["penalties", "bad_words", "min_tokens_bias", "logprobs"],
)
def test_sampling_features_at_every_position(
    plain: ModelRunner, spec: ModelRunner, extra: dict
) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=24, **extra)
    want, _ = _generate(plain, {"rep": REPEATS}, params)
    got, _ = _generate(spec, {"rep": REPEATS}, params)
    assert got == want


def test_chunked_prefill_preemption_and_budget(plain: ModelRunner, spec: ModelRunner) -> None:
    """A token budget that cuts drafts and a small pool that preempts."""
    prompts = {f"r{i}": REPEATS[i:] + NO_REPEAT[:i] for i in range(5)}
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    cfg = {"max_num_batched_tokens": 12, "long_prefill_token_threshold": 6, "num_blocks": 32}
    want, _ = _generate(plain, prompts, params, **cfg)
    got, sched = _generate(spec, prompts, params, **cfg)
    assert got == want
    assert sched.statistics().spec_num_accepted_tokens > 0
    assert sched.statistics().num_preemptions > 0


def test_draft_model_equal_to_target_is_accepted(checkpoint: Path, plain: ModelRunner) -> None:
    """A draft equal to the target proposes the target's own greedy tokens: all accepted
    (a verifier that accepted anything, or nothing, would fail one of the two checks)."""
    k = 3
    runner = _runner(checkpoint, k, draft=checkpoint)
    prompts = {"rep": REPEATS, "miss": NO_REPEAT}
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    want, _ = _generate(plain, prompts, params)
    got, sched = _generate(runner, prompts, params, num_lookahead_tokens=k)
    assert got == want
    st = sched.statistics()
    assert st.spec_num_draft_tokens >= 2 * 20
    assert st.spec_num_accepted_tokens == st.spec_num_draft_tokens  # float32: exact
    # Chunked prefill, a budget that cuts drafts, a pool that preempts: still equal, and
    # the draft (recomputing a resumed request from its tokens) still agrees.
    prompts = {f"r{i}": REPEATS[i:] + NO_REPEAT[:i] for i in range(5)}
    cfg = {"max_num_batched_tokens": 12, "long_prefill_token_threshold": 6, "num_blocks": 32}
    want, _ = _generate(plain, prompts, params, **cfg)
    got, sched = _generate(runner, prompts, params, num_lookahead_tokens=k, **cfg)
    assert got == want
    st = sched.statistics()
    assert st.spec_num_accepted_tokens == st.spec_num_draft_tokens > 0
    assert st.num_preemptions > 0


def test_draft_model_of_another_vocabulary_is_refused(tmp_path: Path, checkpoint: Path) -> None:
    other = make_tiny_checkpoint(tmp_path, "qwen3", vocab_size=96, num_kv_heads=2)
    with pytest.raises(ValueError, match="speculative_config: the draft model's vocabulary"):
        _runner(checkpoint, 2, draft=other)


def _suffix_runner(checkpoint: Path, **settings: float) -> ModelRunner:
    runner = ModelRunner(
        checkpoint, dtype="float32", block_size=BS, max_num_seqs=8, max_model_len=MAX_LEN,
        num_speculative_tokens=8, suffix=SuffixSettings(**settings),  # type: ignore[arg-type]
    )  # fmt: skip
    runner.load_model()
    runner.initialize_kv_cache(BLOCKS)
    return runner


def test_suffix_decoding_equal_accepted_and_freed(checkpoint: Path, plain: ModelRunner) -> None:
    """Method suffix: variable-length drafts (up to 8) verified as ngram's are; greedy
    output unchanged through a token budget and preemption; the records of the finished
    requests are freed, their outputs cached for the requests after them."""
    runner = _suffix_runner(checkpoint, max_cached_requests=3)
    assert isinstance(runner.proposer, SuffixProposer)
    prompts = {f"r{i}": REPEATS[i:] + NO_REPEAT[:i] for i in range(5)}
    params = SamplingParams(temperature=0.0, max_tokens=30, ignore_eos=True)
    cfg = {"max_num_batched_tokens": 12, "long_prefill_token_threshold": 6, "num_blocks": 32}
    want, _ = _generate(plain, prompts, params, **cfg)
    got, sched = _generate(runner, prompts, params, **cfg)
    assert got == want
    stats = sched.statistics()
    assert 0 < stats.spec_num_accepted_tokens < stats.spec_num_draft_tokens
    assert stats.num_preemptions > 0
    assert len(stats.spec_accepted_per_pos) > 4  # some drafts longer than ngram's k = 4
    # a request's record lives as long as its batch row: the step after the last finish
    # tells the runner, and then none is left
    assert runner.proposer.statistics().active_requests == 1
    runner.execute(sched.schedule())
    assert runner.proposer.statistics().active_requests == 0
    assert runner.proposer.statistics().cached_requests == 3  # bounded: the 3 newest starts
    seeded = SamplingParams(temperature=0.8, top_k=20, seed=7, max_tokens=30, ignore_eos=True)
    assert _generate(runner, prompts, seeded)[0] == _generate(plain, prompts, seeded)[0]
