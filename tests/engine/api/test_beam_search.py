"""Beam search on the engine equals transformers' beam search on a tiny random Llama (no EOS
in play: both keep the best ``beam_width`` of all extensions by cumulative logprob), and a
crash mid-search changes nothing."""

import pytest
import torch
from transformers import AutoModelForCausalLM

from actorllm.core.beam_search import BeamSearchParams, BeamSearchState, StepResult
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.structured_outputs_params import StructuredOutputsParams
from actorllm.engine import AsyncEngine
from actorllm.testing.engine_harness import check_invariants, inject_fault

pytestmark = pytest.mark.anyio

PROMPT = [5, 17, 42, 8, 99]


def _engine(model: str, **kw):
    kw.setdefault("max_model_len", 256)
    kw.setdefault("kv_cache_memory_bytes", 8 * 2**20)
    return AsyncEngine.open(model, **kw)


def _hf_beams(model: str, width: int, steps: int) -> list[list[int]]:
    hf = AutoModelForCausalLM.from_pretrained(model, torch_dtype=torch.float32).eval()
    with torch.no_grad():
        out = hf.generate(
            torch.tensor([PROMPT]),
            num_beams=width,
            num_return_sequences=width,
            do_sample=False,
            max_new_tokens=steps,
            min_new_tokens=steps,
            length_penalty=1.0,
            eos_token_id=None,
            pad_token_id=0,
        )
    return [row[len(PROMPT) :].tolist() for row in out]


async def _search(eng, width: int, steps: int, **kw):
    params = BeamSearchParams(beam_width=width, max_tokens=steps, ignore_eos=True, **kw)
    outs = [o async for o in eng.beam_search({"prompt_token_ids": PROMPT}, params)]
    assert len(outs) == 1 and outs[0].finished
    return outs[0]


async def test_beams_equal_transformers(tiny_model):
    expected = _hf_beams(tiny_model, 3, 6)
    async with _engine(tiny_model) as eng:
        out = await _search(eng, 3, 6)
        assert [c.token_ids for c in out.outputs] == expected
        assert [c.index for c in out.outputs] == [0, 1, 2]
        scores = [c.cumulative_logprob for c in out.outputs]
        assert scores == sorted(scores, reverse=True)
        assert all(c.finish_reason == "length" for c in out.outputs)
        assert out.prompt_token_ids == PROMPT
        await check_invariants(eng)


async def test_width_one_is_greedy(tiny_model):
    async with _engine(tiny_model) as eng:
        out = await _search(eng, 1, 5)
        greedy = None
        params = SamplingParams(temperature=0.0, max_tokens=5, ignore_eos=True)
        async for o in eng.generate({"prompt_token_ids": PROMPT}, params):
            greedy = o
        assert out.outputs[0].token_ids == greedy.outputs[0].token_ids


async def test_eos_completes_a_beam_kept_out_of_its_tokens(tiny_model):
    async with _engine(tiny_model) as eng:
        free = await _search(eng, 2, 3)
    top = free.outputs[0]
    eos = top.token_ids[1]  # pretend the top beam's second token is EOS
    state = BeamSearchState(PROMPT, BeamSearchParams(beam_width=2, max_tokens=3), eos)
    for position in range(2):
        step = StepResult(top.token_ids[position], top.logprobs[position])
        state.advance([step] * len(state.beams))
    stopped = [b for b in state.completed if b.finish_reason == "stop"]
    assert stopped and all(b.tokens[-1] == eos and b.stop_reason == eos for b in stopped)
    assert all(eos not in state.generated(b)[-1:] for b in stopped)
    assert all(eos not in b.tokens[len(PROMPT) :] for b in state.beams)


@pytest.mark.parametrize("actor", ["worker", "scheduler", "output_processor"])
async def test_a_crash_mid_search_changes_nothing(tiny_model, actor):
    async with _engine(tiny_model) as eng:
        clean = await _search(eng, 3, 6)
    async with _engine(tiny_model) as eng:
        inject_fault(eng, actor, at_step=4)
        crashed = await _search(eng, 3, 6)
        await check_invariants(eng)
        restarts = eng._actor_stat("restarts")
    assert restarts["executor" if actor == "worker" else actor] >= 1, restarts
    assert [c.token_ids for c in crashed.outputs] == [c.token_ids for c in clean.outputs]


def test_params_are_checked():
    with pytest.raises(ValueError, match="beam_width"):
        BeamSearchParams(beam_width=0, max_tokens=4)
    with pytest.raises(ValueError, match="max_tokens"):
        BeamSearchParams(beam_width=2, max_tokens=0)
    with pytest.raises(ValueError, match="structured_outputs"):
        BeamSearchParams(
            beam_width=2, max_tokens=4, structured_outputs=StructuredOutputsParams(regex="a+")
        )
