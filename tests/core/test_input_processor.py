import pytest

from actorllm.core.errors import EmptyPromptError, InvalidRequestError, RequestTooLongError
from actorllm.core.input_processor import InputProcessor
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.thinking_budget import ThinkingMarkers
from actorllm.testing.engine_harness import demo_tokenizer


@pytest.fixture
def inputs() -> InputProcessor:
    return InputProcessor(demo_tokenizer(), vocab_size=4096, max_model_len=32, eos_token_ids=[0, 2])


def test_text_prompt_is_tokenized(inputs):
    r = inputs.process("a", "Hello world", SamplingParams())
    assert r.prompt_text == "Hello world"
    assert r.prompt_token_ids == demo_tokenizer().encode("Hello world")
    assert r.eos_token_id == 0
    assert [c.child_id for c in r.children] == ["a"]


def test_token_prompt_passes_through(inputs):
    r = inputs.process("a", {"prompt_token_ids": [5, 6, 7]}, SamplingParams())
    assert r.prompt_token_ids == [5, 6, 7]
    assert r.prompt_text is None


def test_chat_applies_the_template_without_double_specials(inputs):
    r = inputs.process("a", [{"role": "user", "content": "Hi"}], SamplingParams(), is_chat=True)
    assert r.prompt_text.startswith("<|im_start|>user\nHi<|im_end|>")
    assert r.prompt_text.endswith("<|im_start|>assistant\n")
    assert r.prompt_token_ids[0] == 1  # <|im_start|>, once


@pytest.mark.parametrize(
    ("prompt", "error", "param"),
    [
        ("", EmptyPromptError, "prompt"),
        ({"prompt_token_ids": []}, EmptyPromptError, "prompt"),
        ("word " * 40, RequestTooLongError, "prompt"),
        ({"prompt_token_ids": [1, 99999]}, InvalidRequestError, "prompt"),
        ({"prompt_token_ids": ["x"]}, InvalidRequestError, "prompt"),
        (12, InvalidRequestError, "prompt"),
    ],
)
def test_bad_prompts_are_typed_errors(inputs, prompt, error, param):
    with pytest.raises(error) as info:
        inputs.process("a", prompt, SamplingParams())
    assert info.value.param == param


def test_out_of_vocab_sampling_params_are_rejected(inputs):
    with pytest.raises(InvalidRequestError) as info:
        inputs.process("a", "hi", SamplingParams(logit_bias={5000: 1.0}))
    assert info.value.param == "logit_bias"


def test_chat_errors(inputs):
    with pytest.raises(InvalidRequestError):
        inputs.process("a", [], SamplingParams(), is_chat=True)


def test_n_fans_out_with_child_ids_and_seeds(inputs):
    r = inputs.process("req", "hi", SamplingParams(n=3, seed=10))
    assert [(c.child_id, c.index, c.params.seed, c.params.n) for c in r.children] == [
        ("0_req", 0, 10, 1),
        ("1_req", 1, 11, 1),
        ("2_req", 2, 12, 1),
    ]


def test_the_tokenizers_eos_is_the_requests_as_vllm() -> None:
    """vLLM's primary EOS is the tokenizer's (stop_reason None when it ends a sequence);
    the model's other EOS ids, listed first or not, are stop ids (Llama 3 instruct:
    generation_config [128001, 128008, 128009], the tokenizer's <|eot_id|> 128009)."""
    inputs = InputProcessor(
        demo_tokenizer(), vocab_size=4096, max_model_len=32, eos_token_ids=[2, 0]
    )
    r = inputs.process("a", "hi", SamplingParams())
    assert r.eos_token_id == 0  # the demo tokenizer's <|endoftext|>
    assert r.children[0].params.stop_token_ids == [2]


def test_extra_eos_ids_stop_like_stop_token_ids(inputs):
    (child,) = inputs.process("a", "hi", SamplingParams(stop_token_ids=[7])).children
    assert child.params.stop_token_ids == [7, 2]
    (child,) = inputs.process("b", "hi", SamplingParams(ignore_eos=True)).children
    assert child.params.stop_token_ids == []


def test_bad_words_are_tokenized_with_and_without_a_space(inputs):
    (child,) = inputs.process("a", "hi", SamplingParams(bad_words=["world"])).children
    tok = demo_tokenizer()
    assert tok.encode("world") in child.params.bad_words_token_ids
    assert tok.encode(" world") in child.params.bad_words_token_ids


def test_bad_words_join_sequences_the_server_banned(inputs):
    """gpt-oss's tool_choice "required" bans sequences before the engine sees the request:
    the request's own bad_words are added beside them, once, however often it is processed."""
    banned = [[5, 6, 7]]
    params = SamplingParams(bad_words=["world"], bad_words_token_ids=[list(banned[0])])
    (child,) = inputs.process("a", "hi", params).children
    tok = demo_tokenizer()
    ids = child.params.bad_words_token_ids
    assert ids[0] == banned[0]
    assert tok.encode("world") in ids and tok.encode(" world") in ids
    (again,) = inputs.process("b", "hi", child.params).children  # a replay
    assert again.params.bad_words_token_ids == ids


def test_truncate_prompt_tokens_keeps_the_last_tokens(inputs):
    full = inputs.process("r", "a b c d e f", SamplingParams())
    out = inputs.process("r", "a b c d e f", SamplingParams(truncate_prompt_tokens=2))
    assert out.prompt_token_ids == full.prompt_token_ids[-2:]
    assert out.prompt_text is None  # the text no longer matches the ids


def test_cache_salt_comes_with_the_prompt_mapping(inputs):
    r = inputs.process("a", {"prompt": "Hello", "cache_salt": "tenant-a"}, SamplingParams())
    assert r.cache_salt == "tenant-a"
    assert inputs.process("b", "Hello", SamplingParams()).cache_salt is None
    with pytest.raises(InvalidRequestError) as info:
        inputs.process("c", {"prompt_token_ids": [5], "cache_salt": ""}, SamplingParams())
    assert info.value.param == "cache_salt"


def test_logprobs_minus_one_is_the_vocabulary_within_max_logprobs():
    tok = demo_tokenizer()
    unlimited = InputProcessor(tok, vocab_size=4096, max_model_len=32, max_logprobs=-1)
    (child,) = unlimited.process("r", "hello", SamplingParams(logprobs=-1)).children
    assert child.params.logprobs == 4096
    limited = InputProcessor(tok, vocab_size=4096, max_model_len=32)  # vLLM's default, 20
    with pytest.raises(InvalidRequestError, match="greater than max allowed: 20") as info:
        limited.process("r", "hello", SamplingParams(logprobs=21))
    assert info.value.param == "logprobs"


def test_thinking_token_budget_needs_the_reasoning_markers(inputs):
    with pytest.raises(InvalidRequestError, match="reasoning_config is not configured") as err:
        inputs.process("a", "hi", SamplingParams(thinking_token_budget=3))
    assert err.value.param == "thinking_token_budget"
    (child,) = inputs.process("a", "hi", SamplingParams(thinking_token_budget=-1)).children
    assert child.params.thinking_markers is None


def test_thinking_token_budget_carries_the_markers_to_the_sampler():
    markers = ThinkingMarkers(start=(7,), end=(8, 9))
    inputs = InputProcessor(
        demo_tokenizer(), vocab_size=4096, max_model_len=32, thinking_markers=markers
    )
    (child,) = inputs.process("a", "hi", SamplingParams(thinking_token_budget=0)).children
    assert child.params.thinking_markers == markers
    (free,) = inputs.process("b", "hi", SamplingParams()).children
    assert free.params.thinking_markers is None  # no budget: the sampler reads nothing
