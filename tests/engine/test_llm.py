"""The synchronous LLM facade (vLLM's offline API)."""

import pytest

from actorllm.core.errors import RequestTooLongError
from actorllm.core.sampling_params import SamplingParams
from actorllm.engine import LLM


@pytest.fixture(scope="module")
def llm(tiny_model):
    with LLM(tiny_model, max_model_len=256, kv_cache_memory_bytes=8 * 2**20) as engine:
        yield engine


def test_generate_returns_one_final_output_per_prompt_in_order(llm):
    prompts = ["first prompt", "a second, longer prompt for the batch", "3"]
    outs = llm.generate(prompts, SamplingParams(temperature=0.0, max_tokens=5), use_tqdm=False)
    assert [o.prompt for o in outs] == prompts
    assert all(o.finished and len(o.outputs[0].token_ids) == 5 for o in outs)
    again = llm.generate(prompts[1], SamplingParams(temperature=0.0, max_tokens=5), use_tqdm=False)
    assert again[0].outputs[0].token_ids == outs[1].outputs[0].token_ids


def test_per_prompt_params_and_token_prompts(llm):
    outs = llm.generate(
        [{"prompt_token_ids": [5, 6, 7]}, "text"],
        [SamplingParams(max_tokens=2), SamplingParams(max_tokens=4, n=2)],
        use_tqdm=False,
    )
    assert len(outs[0].outputs[0].token_ids) == 2
    assert [len(c.token_ids) for c in outs[1].outputs] == [4, 4]
    with pytest.raises(ValueError):
        llm.generate(["a", "b"], [SamplingParams()], use_tqdm=False)


def test_chat_uses_the_template(llm):
    (out,) = llm.chat(
        [{"role": "user", "content": "Hello!"}], SamplingParams(max_tokens=3), use_tqdm=False
    )
    assert out.prompt.startswith("<|im_start|>user\nHello!")
    assert len(out.outputs[0].token_ids) <= 3


def test_errors_surface_after_the_batch(llm):
    with pytest.raises(RequestTooLongError):
        llm.generate(["ok", "word " * 400], SamplingParams(max_tokens=2), use_tqdm=False)


def test_progress_bar_and_control_plane(llm, capsys):
    llm.generate(["x", "y"], SamplingParams(max_tokens=1), use_tqdm=True)
    assert "Processed prompts" in capsys.readouterr().err
    llm.sleep(1)
    llm.wake_up()
    assert llm.reset_prefix_cache()
