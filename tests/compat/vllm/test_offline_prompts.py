"""The prompt forms ``LLM.generate`` and ``LLMEngine.add_request`` accept."""

import pytest

from actorllm.compat.vllm.offline_prompts import as_prompt_list, per_prompt
from actorllm.core.errors import InvalidRequestError


def test_every_vllm_form_and_a_mix():
    mixed = [
        "text",
        {"prompt": "dict"},
        {"prompt_token_ids": [1, 2]},
        {"prompt": "t", "prompt_token_ids": [3]},
    ]
    assert as_prompt_list(mixed) == mixed
    assert as_prompt_list("one") == ["one"]
    assert as_prompt_list({"prompt_token_ids": [4]}) == [{"prompt_token_ids": [4]}]
    assert as_prompt_list(("a", "b")) == ["a", "b"]


@pytest.mark.parametrize(
    "bad",
    [
        [1, 2, 3],
        [["a"]],
        {"prompt": "x", "multi_modal_data": {"image": None}},
        {"prompt": 3},
        {},
        3.5,
    ],
)
def test_unsupported_forms_are_refused_naming_prompt(bad):
    with pytest.raises(InvalidRequestError) as info:
        as_prompt_list(bad)
    assert info.value.param == "prompt"


def test_per_prompt_values():
    assert per_prompt(None, 2, 0, "priorities") == [0, 0]
    assert per_prompt(7, 2, 0, "priorities") == [7, 7]
    assert per_prompt([1, 2], 2, 0, "priorities") == [1, 2]
    with pytest.raises(ValueError, match="got 1 priorities for 2 prompts"):
        per_prompt([1], 2, 0, "priorities")


def test_vllms_typed_dicts_build_accepted_prompts():
    from actorllm.inputs import EmbedsPrompt, SingletonPrompt, TextPrompt, TokensPrompt

    embeds = EmbedsPrompt(prompt_embeds=[[0.0, 1.0]])
    prompts: list[SingletonPrompt] = [
        "s",
        TextPrompt(prompt="t"),
        TokensPrompt(prompt_token_ids=[1]),
        embeds,
    ]
    assert as_prompt_list(prompts) == prompts
