"""EAGLE heads (speculative_config method "eagle") through the real scheduler and runner.

Every draft the runner proposes must equal what transformers' Llama layer computes from the
target's hidden states (the head's own reference, recomputed densely from the tokens known
at that step): after a whole prefill, after chunked prefill, after verify steps that
rejected drafts, after a preemption. A head that ignored the hidden states, shifted the
rows, or read rejected positions would draft something else. Greedy output equals decoding
without speculation, and no KV block leaks."""

from __future__ import annotations

from pathlib import Path

import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.scheduler import Scheduler
from actorllm.worker.model_runner import ModelRunner
from actorllm.worker.spec_decode.draft_model import DraftModelError
from actorllm.worker.spec_decode.eagle import aux_layer_ids
from tests.helpers.eagle import (
    Eagle3Reference,
    EagleReference,
    make_eagle3_head,
    make_eagle_head,
)
from tests.helpers.models import make_tiny_checkpoint
from tests.helpers.spec_sched import Proposal, generate_with_drafts

BS, BLOCKS, MAX_LEN, K = 4, 64, 96, 3
PROMPTS = {"a": [5, 9, 17, 33, 5, 9, 17, 33, 5, 9], "b": [3, 14, 15, 92, 65, 35, 89, 79, 32]}


@pytest.fixture(scope="module")
def target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(tmp_path_factory.mktemp("target"), "llama", num_kv_heads=2)


@pytest.fixture(scope="module", params=["bias", "hass"])
def head(
    request: pytest.FixtureRequest, target: Path, tmp_path_factory: pytest.TempPathFactory
) -> Path:
    hass = request.param == "hass"
    return make_eagle_head(tmp_path_factory.mktemp("eagle"), target, bias=not hass, hass=hass)


def _runner(target: Path, head: Path | None, method: str = "eagle") -> ModelRunner:
    runner = ModelRunner(
        target, dtype="float32", block_size=BS, max_num_seqs=8, max_model_len=MAX_LEN,
        num_speculative_tokens=K if head is not None else 0,
        draft_model=None if head is None else str(head), draft_method=method,  # type: ignore[arg-type]
    )  # fmt: skip
    runner.load_model()
    runner.initialize_kv_cache(BLOCKS)
    return runner


def _generate(
    runner: ModelRunner, prompts: dict[str, list[int]], params: SamplingParams, **cfg: int
) -> tuple[dict[str, list[int]], Scheduler, list[Proposal]]:
    cfg.setdefault("num_blocks", BLOCKS)
    return generate_with_drafts(
        runner, prompts, params, max_model_len=MAX_LEN, block_size=BS, **cfg
    )


def _check_drafts(ref: EagleReference | Eagle3Reference, seen: list[Proposal]) -> None:
    assert seen
    for tokens, drafts in seen:
        assert 1 <= len(drafts) <= K
        assert drafts == ref.drafts(tokens, len(drafts)), tokens


def test_drafts_match_the_reference_and_greedy_is_unchanged(target: Path, head: Path) -> None:
    _check_method(target, head, "eagle", EagleReference(target, head))


def _check_method(
    target: Path, head: Path, method: str, ref: EagleReference | Eagle3Reference
) -> None:
    params = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
    want, _, _ = _generate(_runner(target, None), PROMPTS, params)
    runner = _runner(target, head, method)
    got, sched, seen = _generate(runner, PROMPTS, params, num_lookahead_tokens=K)
    assert got == want
    st = sched.statistics()
    assert st.spec_num_draft_tokens >= 20
    assert st.spec_num_accepted_tokens < st.spec_num_draft_tokens  # a random head misses
    _check_drafts(ref, seen)
    # chunked prefill (chunks that sample nothing), drafts cut by the budget, preemption
    prompts = {f"r{i}": PROMPTS["a"][i:] + PROMPTS["b"][:i] for i in range(5)}
    cfg = {"max_num_batched_tokens": 10, "long_prefill_token_threshold": 5, "num_blocks": 32}
    params = params.clone(max_tokens=30)
    want, _, _ = _generate(_runner(target, None), prompts, params, **cfg)
    got, sched, seen = _generate(runner, prompts, params, num_lookahead_tokens=K, **cfg)
    assert got == want
    assert sched.statistics().num_preemptions > 0
    _check_drafts(ref, seen)


def test_a_head_of_another_width_is_refused(target: Path, tmp_path: Path) -> None:
    wide = make_tiny_checkpoint(tmp_path / "wide", "llama", hidden_size=96, num_kv_heads=2)
    head = make_eagle_head(tmp_path / "head", wide)
    with pytest.raises(DraftModelError, match="hidden size \\(96\\) differs"):
        _runner(target, head)


AUX = [1, 2, 3]


@pytest.fixture(scope="module")
def deep_target(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return make_tiny_checkpoint(
        tmp_path_factory.mktemp("deep"), "llama", num_layers=4, num_kv_heads=2
    )


@pytest.mark.parametrize("draft_vocab", [None, 48], ids=["same-vocab", "draft-vocab-48"])
def test_eagle3_drafts_match_the_reference(
    deep_target: Path, tmp_path: Path, draft_vocab: int | None
) -> None:
    """EAGLE-3: the target keeps the residual stream entering layers 1, 2 and 3; the head
    fuses them, drafts over its own vocabulary (mapped to the target's by d2t)."""
    head = make_eagle3_head(tmp_path / "e3", deep_target, draft_vocab=draft_vocab, aux_ids=AUX)
    _check_method(deep_target, head, "eagle3", Eagle3Reference(deep_target, head, AUX))


def test_eagle3_layers_by_default_and_refused(tmp_path: Path) -> None:
    head = make_eagle3_head(tmp_path / "e3", make_tiny_checkpoint(tmp_path / "t", "llama"))
    assert aux_layer_ids(head, 32) == (2, 16, 29)  # vLLM's (2, L // 2, L - 3)
    with pytest.raises(DraftModelError, match="reads target layers \\[2, 1, -1\\]"):
        aux_layer_ids(head, 2)


def test_a_head_of_the_other_kind_is_refused(target: Path, head: Path, tmp_path: Path) -> None:
    with pytest.raises(DraftModelError, match=r"is an EAGLE head .*use method 'eagle'"):
        _runner(target, head, "eagle3")
    e3 = make_eagle3_head(tmp_path / "e3", target)
    with pytest.raises(DraftModelError, match=r"is an EAGLE-3 head .*use method 'eagle3'"):
        _runner(target, e3, "eagle")
