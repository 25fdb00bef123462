"""Speculative decoding (ngram) in the actor engine on a tiny real Llama: greedy and
seeded outputs equal the engine's without speculation, drafts are counted, a stop string
inside an accepted run cuts exactly, and a crash during a speculative step changes
nothing."""

import pytest

from actorllm.core.sampling_params import SamplingParams
from actorllm.engine import AsyncEngine
from actorllm.testing import inject_fault
from actorllm.testing.engine_harness import check_invariants
from tests.helpers.spec_model import PROMPT_IDS, SPEC, small_vocab_llama

pytestmark = pytest.mark.anyio

PROMPTS = [{"prompt_token_ids": ids} for ids in PROMPT_IDS]
GREEDY = SamplingParams(temperature=0.0, max_tokens=24, ignore_eos=True)
SEEDED = SamplingParams(temperature=1.0, top_p=0.9, seed=11, max_tokens=16, ignore_eos=True)


def engine(small_vocab_model: str, **kw):
    kw.setdefault("max_model_len", 256)
    kw.setdefault("kv_cache_memory_bytes", 4 * 2**20)
    return AsyncEngine.open(small_vocab_model, **kw)


async def run_all(eng, params) -> list[list[int]]:
    outs = []
    for p in PROMPTS:
        last = None
        async for out in eng.generate(p, params):
            last = out
        outs.append(last.outputs[0].token_ids)
    return outs


@pytest.fixture(scope="module")
def anyio_backend():
    return "trio"


@pytest.fixture(scope="module")
def small_vocab_model(tmp_path_factory) -> str:
    return small_vocab_llama(tmp_path_factory.mktemp("spec-llama"))


@pytest.fixture(scope="module")
async def reference(small_vocab_model):
    async with engine(small_vocab_model) as eng:
        return await run_all(eng, GREEDY), await run_all(eng, SEEDED)


async def test_equal_outputs_and_counted_drafts(small_vocab_model, reference):
    async with engine(small_vocab_model, speculative_config=SPEC) as eng:
        assert await run_all(eng, GREEDY) == reference[0]
        assert await run_all(eng, SEEDED) == reference[1]
        stats = await eng.get_stats()
        assert stats.spec_decode_num_draft_tokens > 0
        assert 0 < stats.spec_decode_num_accepted_tokens <= stats.spec_decode_num_draft_tokens
        assert sum(stats.spec_decode_num_accepted_tokens_per_pos) == (
            stats.spec_decode_num_accepted_tokens
        )
        await check_invariants(eng)


async def test_a_crash_in_a_speculative_step_changes_nothing(small_vocab_model, reference):
    async with engine(small_vocab_model, speculative_config=SPEC) as eng:
        inject_fault(eng, "worker", when=lambda so: bool(so.scheduled_spec_decode_tokens))
        assert await run_all(eng, GREEDY) == reference[0]
        inject_fault(eng, "worker", when=lambda so: bool(so.scheduled_spec_decode_tokens))
        assert await run_all(eng, SEEDED) == reference[1]
        stats = await eng.get_stats()
        assert stats.actor_restarts["executor"] >= 2
        await check_invariants(eng)


async def test_stop_string_inside_an_accepted_run(small_vocab_model, reference):
    async with engine(small_vocab_model) as eng:
        free = None
        async for out in eng.generate(PROMPTS[0], GREEDY):
            free = out.outputs[0]
    stop = next(free.text[i : i + 3] for i in range(6, len(free.text) - 3)
                if free.text[i : i + 3].strip())  # fmt: skip
    want_text = free.text[: free.text.index(stop)]
    async with engine(small_vocab_model, speculative_config=SPEC) as eng:
        got = None
        async for out in eng.generate(PROMPTS[0], GREEDY.clone(stop=[stop])):
            got = out.outputs[0]
        assert got.text == want_text and got.finish_reason == "stop"
        await check_invariants(eng)


async def test_structured_outputs_stay_valid_beside_speculation(tiny_model):
    """Structured requests (no drafts: their grammar advances one token a step) share steps
    with speculative ones and stay valid."""
    import anyio

    from tests.helpers.structured_specs import all_specs, is_valid

    specs = all_specs()[:6]
    results: dict[int, tuple[str, str | None]] = {}
    async with engine(tiny_model, speculative_config=SPEC) as eng:

        async def one(i: int) -> None:
            params = SamplingParams(max_tokens=60, temperature=0.0, structured_outputs=specs[i])
            async for out in eng.generate(f"Answer {i}:", params):
                results[i] = (out.outputs[0].text, out.outputs[0].finish_reason)

        async def free() -> None:
            async for _ in eng.generate("one two one two one two", GREEDY):
                pass

        async with anyio.create_task_group() as tg:
            tg.start_soon(free)
            for i in range(len(specs)):
                tg.start_soon(one, i)
        await check_invariants(eng)
    bad = [(i, t, r) for i, (t, r) in results.items() if r != "stop" or not is_valid(specs[i], t)]
    assert not bad, bad


async def test_draft_model_equal_to_the_target(small_vocab_model, reference):
    """method draft_model with the target as its own draft: outputs unchanged, every draft
    accepted under greedy, and a crash in a speculative step changes nothing (the draft's
    cache is rebuilt from the ledger's tokens like the target's)."""
    spec = {"method": "draft_model", "model": small_vocab_model, "num_speculative_tokens": 3}
    async with engine(small_vocab_model, speculative_config=spec) as eng:
        assert await run_all(eng, GREEDY) == reference[0]
        stats = await eng.get_stats()
        assert stats.spec_decode_num_draft_tokens >= 20
        assert stats.spec_decode_num_accepted_tokens == stats.spec_decode_num_draft_tokens
        inject_fault(eng, "worker", when=lambda so: bool(so.scheduled_spec_decode_tokens))
        assert await run_all(eng, SEEDED) == reference[1]
        assert (await eng.get_stats()).actor_restarts["executor"] >= 1
        await check_invariants(eng)


async def test_eagle_head(small_vocab_model, reference, tmp_path):
    """method eagle: outputs unchanged (greedy and seeded), drafts counted, and a crash in a
    speculative step changes nothing (the head's cache and hidden states are rebuilt from
    the re-sent requests' prefill)."""
    from pathlib import Path

    from tests.helpers.eagle import make_eagle_head

    head = make_eagle_head(tmp_path / "eagle", Path(small_vocab_model))
    spec = {"method": "eagle", "model": str(head), "num_speculative_tokens": 3}
    async with engine(small_vocab_model, speculative_config=spec) as eng:
        assert await run_all(eng, GREEDY) == reference[0]
        stats = await eng.get_stats()
        assert stats.spec_decode_num_draft_tokens >= 20
        inject_fault(eng, "worker", when=lambda so: bool(so.scheduled_spec_decode_tokens))
        assert await run_all(eng, SEEDED) == reference[1]
        assert (await eng.get_stats()).actor_restarts["executor"] >= 1
        await check_invariants(eng)


async def test_eagle3_head(small_vocab_model, reference, tmp_path):
    """method eagle3 (its own draft vocabulary, mapped by d2t): outputs unchanged."""
    from pathlib import Path

    from tests.helpers.eagle import make_eagle3_head

    head = make_eagle3_head(
        tmp_path / "eagle3", Path(small_vocab_model), draft_vocab=64, aux_ids=[1, 1, 1]
    )
    spec = {"method": "eagle3", "model": str(head), "num_speculative_tokens": 3}
    async with engine(small_vocab_model, speculative_config=spec) as eng:
        assert await run_all(eng, GREEDY) == reference[0]
        assert await run_all(eng, SEEDED) == reference[1]
        assert (await eng.get_stats()).spec_decode_num_draft_tokens >= 20
        await check_invariants(eng)


async def test_suffix_decoding(small_vocab_model, reference):
    """method suffix at vLLM's defaults (drafts of up to 24 tokens, as long as the match
    allows): outputs unchanged (greedy and seeded); prompts asked again draft from the
    first answers' outputs (the global cache) and are accepted, also after a crash in a
    speculative step, which changes nothing (the requests' tries are rebuilt from their
    tokens; the past requests' outputs stay with the worker)."""
    async with engine(small_vocab_model, speculative_config={"method": "suffix"}) as eng:
        assert await run_all(eng, GREEDY) == reference[0]
        first = (await eng.get_stats()).spec_decode_num_accepted_tokens
        assert await run_all(eng, GREEDY) == reference[0]
        stats = await eng.get_stats()
        again = stats.spec_decode_num_accepted_tokens
        assert again - first >= 20  # most of the second answers came as drafts
        assert again <= stats.spec_decode_num_draft_tokens
        inject_fault(eng, "worker", when=lambda so: bool(so.scheduled_spec_decode_tokens))
        assert await run_all(eng, GREEDY) == reference[0]
        # the counters restart with the core: these drafts came after the crash, from the
        # outputs the worker kept (without them, as in the first round, none are accepted)
        after = (await eng.get_stats()).spec_decode_num_accepted_tokens
        assert 20 <= after < again + 20
        inject_fault(eng, "worker", when=lambda so: bool(so.scheduled_spec_decode_tokens))
        assert await run_all(eng, SEEDED) == reference[1]
        assert (await eng.get_stats()).actor_restarts["executor"] >= 2
        await check_invariants(eng)
