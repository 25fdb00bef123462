"""Embedding prompts (``--enable-prompt-embeds``, vLLM's ``{"prompt_embeds": tensor}``): the
rows feed the model in place of token embeddings; greedy outputs equal HF transformers'
``generate(inputs_embeds=...)``; the prefix cache shares blocks only between equal rows; bad
tensors are refused by name."""

import pytest
import torch
import transformers

from actorllm import LLM, SamplingParams
from actorllm.core.errors import InvalidRequestError
from actorllm.engine.config import EngineConfig, EngineConfigError

GREEDY = SamplingParams(temperature=0.0, max_tokens=8)
SMALL = dict(max_model_len=256, kv_cache_memory_bytes=8 * 2**20, dtype="float32")
IDS = [[5, 17, 300, 42, 7, 9, 11, 1000, 23, 64, 65, 66, 67, 68, 69, 70, 71, 72], [8, 9, 10]]


@pytest.fixture(scope="module")
def hf(tiny_model):
    return transformers.AutoModelForCausalLM.from_pretrained(tiny_model, dtype=torch.float32)


@pytest.fixture(scope="module")
def llm(tiny_model):
    with LLM(tiny_model, enable_prompt_embeds=True, block_size=16, **SMALL) as llm:
        yield llm


def _embeds(hf, ids: list[int]) -> torch.Tensor:
    with torch.no_grad():
        return hf.get_input_embeddings()(torch.tensor(ids)).clone()  # [T, H]


def test_embeddings_of_the_tokens_give_the_tokens_outputs(llm, hf):
    by_ids = llm.generate([{"prompt_token_ids": ids} for ids in IDS], GREEDY, use_tqdm=False)
    by_embeds = llm.generate(
        [{"prompt_embeds": _embeds(hf, ids)} for ids in IDS], GREEDY, use_tqdm=False
    )
    for a, b in zip(by_ids, by_embeds, strict=True):
        assert b.outputs[0].token_ids == a.outputs[0].token_ids
        assert b.prompt is None and len(b.prompt_token_ids) == len(a.prompt_token_ids)


def test_greedy_matches_transformers_on_random_embeddings(llm, hf):
    torch.manual_seed(0)
    embeds = torch.randn(12, hf.config.hidden_size) * 0.05  # [T, H]: no token's embedding
    with torch.no_grad():
        ref = hf.generate(
            inputs_embeds=embeds[None],
            attention_mask=torch.ones(1, 12, dtype=torch.long),
            max_new_tokens=8,
            do_sample=False,
            eos_token_id=None,
            pad_token_id=0,
        )[0].tolist()
    out = llm.generate({"prompt_embeds": embeds[None]}, GREEDY, use_tqdm=False)[0]  # [1, T, H]
    assert out.outputs[0].token_ids == ref[-8:]


def test_the_prefix_cache_shares_equal_rows_only(llm, hf):
    torch.manual_seed(1)
    base = torch.randn(40, hf.config.hidden_size) * 0.05
    first = llm.generate({"prompt_embeds": base}, GREEDY, use_tqdm=False)[0]
    again = llm.generate({"prompt_embeds": base.clone()}, GREEDY, use_tqdm=False)[0]
    assert again.num_cached_tokens == 32  # two full blocks of 16
    assert again.outputs[0].token_ids == first.outputs[0].token_ids
    changed = base.clone()
    changed[20] += 1.0  # the second block differs
    other = llm.generate({"prompt_embeds": changed}, GREEDY, use_tqdm=False)[0]
    assert other.num_cached_tokens == 16
    zeros = llm.generate({"prompt_token_ids": [0] * 40}, GREEDY, use_tqdm=False)[0]
    assert zeros.num_cached_tokens == 0  # placeholder ids never meet an embedding prompt


def _mixed(hf, ids: list[int], embedded: set[int]) -> dict:
    """vLLM's mixed EmbedsPrompt: the rows at ``embedded`` positions, the tokens elsewhere
    (their rows are zeros, unused)."""
    rows = _embeds(hf, ids)
    mask = [i not in embedded for i in range(len(ids))]
    rows[torch.tensor(mask)] = 0.0
    tokens = [0 if i in embedded else t for i, t in enumerate(ids)]
    return {"prompt_embeds": rows, "prompt_token_ids": tokens, "prompt_is_token_ids": mask}


def test_a_mixed_prompt_gives_the_tokens_outputs(llm, hf):
    ids = IDS[0]
    ref = llm.generate({"prompt_token_ids": ids}, GREEDY, use_tqdm=False)[0]
    for embedded in ({0, 1, 2}, {5, 6, 7, 8}, set(range(len(ids))), {len(ids) - 1}):
        out = llm.generate(_mixed(hf, ids, embedded), GREEDY, use_tqdm=False)[0]
        assert out.outputs[0].token_ids == ref.outputs[0].token_ids, embedded
        assert out.prompt_token_ids[0] == (0 if 0 in embedded else ids[0])


def test_a_mixed_prompt_chunked_across_steps(tiny_model, hf):
    # Prefill in chunks of 16 tokens: the embedded span straddles a chunk boundary.
    ids = [5 + (7 * i) % 900 for i in range(40)]
    with LLM(tiny_model, enable_prompt_embeds=True, max_num_batched_tokens=16, **SMALL) as chunked:
        ref = chunked.generate({"prompt_token_ids": ids}, GREEDY, use_tqdm=False)[0]
        out = chunked.generate(_mixed(hf, ids, set(range(10, 30))), GREEDY, use_tqdm=False)[0]
    assert out.outputs[0].token_ids == ref.outputs[0].token_ids


def test_mixed_prompts_share_cached_blocks_only_where_tokens_and_rows_agree(llm, hf):
    ids = [5 + (11 * i) % 900 for i in range(40)]
    first = llm.generate(_mixed(hf, ids, {3, 4}), GREEDY, use_tqdm=False)[0]
    again = llm.generate(_mixed(hf, ids, {3, 4}), GREEDY, use_tqdm=False)[0]
    assert again.num_cached_tokens == 32
    assert again.outputs[0].token_ids == first.outputs[0].token_ids
    other = list(ids)
    other[20] += 1  # a token of the second block differs
    changed = llm.generate(_mixed(hf, other, {3, 4}), GREEDY, use_tqdm=False)[0]
    assert changed.num_cached_tokens == 16


@pytest.mark.parametrize(
    ("extra", "param", "match"),
    [
        ({"prompt_is_token_ids": [True, False]}, "prompt_token_ids", "needs prompt_token_ids"),
        ({"prompt_token_ids": [1, 2], "prompt_is_token_ids": [True]}, "prompt_is_token_ids",
         "expected 2, got 1"),
        ({"prompt_token_ids": [1], "prompt_is_token_ids": [True, False]}, "prompt_token_ids",
         "expected 2, got 1"),
        ({"prompt_token_ids": [1, 2], "prompt_is_token_ids": [1, 0]}, "prompt_is_token_ids",
         "list of booleans"),
        ({"prompt_token_ids": [1, 2], "prompt_is_token_ids": 5}, "prompt_is_token_ids",
         "list of booleans"),
        ({"prompt_token_ids": "ab", "prompt_is_token_ids": [True, False]}, "prompt_token_ids",
         "list of integers"),
    ],
)  # fmt: skip
def test_bad_mixed_prompts_are_refused_by_name(llm, hf, extra, param, match):
    with pytest.raises(InvalidRequestError, match=match) as err:
        llm.generate({"prompt_embeds": _embeds(hf, [5, 6]), **extra}, GREEDY, use_tqdm=False)
    assert err.value.param == param


def test_prompt_is_token_ids_without_embeddings_is_refused(llm):
    with pytest.raises(InvalidRequestError, match="has no prompt_embeds") as err:
        llm.generate(
            {"prompt_token_ids": [5, 6], "prompt_is_token_ids": [True, True]},
            GREEDY,
            use_tqdm=False,
        )
    assert err.value.param == "prompt_is_token_ids"


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (torch.zeros(3, 5), "hidden_size 5 does not match the model's hidden_size 64"),
        (torch.zeros(2, 3, 64), "must be a 2D tensor"),
        (torch.zeros(3, 64, dtype=torch.int64), "not a floating-point type"),
        (torch.full((3, 64), float("nan")), "NaN or infinite"),
        (torch.zeros(0, 64), "non-empty"),
        ([[0.0] * 64], "must be a torch.Tensor"),
    ],
)
def test_bad_tensors_are_refused_by_name(llm, value, match):
    with pytest.raises(InvalidRequestError, match=match) as err:
        llm.generate({"prompt_embeds": value}, GREEDY, use_tqdm=False)
    assert err.value.param == "prompt_embeds"


def test_prompt_logprobs_are_refused_with_embeddings(llm, hf):
    params = SamplingParams(max_tokens=2, prompt_logprobs=1)
    with pytest.raises(InvalidRequestError, match="prompt_logprobs is not compatible"):
        llm.generate({"prompt_embeds": _embeds(hf, [5, 6])}, params, use_tqdm=False)


def test_beam_search_refuses_embeddings(llm, hf):
    from actorllm.sampling_params import BeamSearchParams

    with pytest.raises(InvalidRequestError, match="beam search does not take prompt_embeds"):
        params = BeamSearchParams(beam_width=2, max_tokens=4)
        llm.beam_search([{"prompt_embeds": _embeds(hf, [5, 6])}], params)


def test_without_the_flag_the_request_names_it(tiny_model, hf):
    with (
        LLM(tiny_model, **SMALL) as plain,
        pytest.raises(InvalidRequestError, match="--enable-prompt-embeds"),
    ):
        plain.generate({"prompt_embeds": _embeds(hf, [5, 6])}, GREEDY, use_tqdm=False)


def test_speculative_decoding_refuses_the_flag_by_name():
    """Parallel setups take embedding prompts (tests/distributed/test_prompt_embeds_parallel.py);
    a draft model's proposer does not."""
    spec = {"method": "ngram", "num_speculative_tokens": 2}
    with pytest.raises(EngineConfigError, match="enable_prompt_embeds"):
        EngineConfig(model="m", enable_prompt_embeds=True, speculative_config=spec)


# -- LLM.chat with prompt_embeds content parts (vLLM's chat parser takes them offline too) --


def _b64(tensor: torch.Tensor) -> str:
    import base64
    import io

    buf = io.BytesIO()
    torch.save(tensor, buf)
    return base64.b64encode(buf.getvalue()).decode()


def test_llm_chat_splices_prompt_embeds_parts(llm, hf):
    text = "Hello, my name is"
    ids = llm.get_tokenizer()(text, add_special_tokens=False).input_ids
    part = {"type": "prompt_embeds", "data": _b64(_embeds(hf, ids))}
    by_text, by_rows, two, same = llm.chat(
        [
            [{"role": "user", "content": text}],
            [{"role": "user", "content": [part]}],
            [{"role": "user", "content": [part, {"type": "text", "text": " and "}, part]}],
            [{"role": "user", "content": f"{text}\n and \n{text}"}],
        ],
        GREEDY,
        use_tqdm=False,
    )
    # The rows of the text's own tokens answer as the text; parts join with newlines.
    assert by_rows.outputs[0].token_ids == by_text.outputs[0].token_ids
    assert len(by_rows.prompt_token_ids) == len(by_text.prompt_token_ids)
    assert two.outputs[0].token_ids == same.outputs[0].token_ids
    assert two.prompt_token_ids.count(0) >= 2 * len(ids)  # the rows' placeholders
    random_rows = {"type": "prompt_embeds", "data": _b64(torch.randn(4, hf.config.hidden_size))}
    other = llm.chat([{"role": "user", "content": [random_rows]}], GREEDY, use_tqdm=False)[0]
    assert other.outputs[0].token_ids != by_text.outputs[0].token_ids


@pytest.mark.parametrize(
    ("content", "param", "match"),
    [
        ([{"type": "prompt_embeds"}], "prompt_embeds", "non-empty `data`"),
        ([{"type": "prompt_embeds", "data": "%%%"}], "prompt_embeds", "base64"),
        ("say <prompt_embeds>", "messages", "reserved placeholder"),
    ],
)
def test_llm_chat_bad_parts_are_refused_by_name(llm, content, param, match):
    with pytest.raises(InvalidRequestError, match=match) as err:
        llm.chat([{"role": "user", "content": content}], GREEDY, use_tqdm=False)
    assert err.value.param == param


def test_llm_chat_parts_without_the_flag_name_it(tiny_model, hf):
    part = {"type": "prompt_embeds", "data": _b64(_embeds(hf, [5, 6]))}
    with (
        LLM(tiny_model, **SMALL) as plain,
        pytest.raises(InvalidRequestError, match="--enable-prompt-embeds"),
    ):
        plain.chat([{"role": "user", "content": [part]}], GREEDY, use_tqdm=False)
