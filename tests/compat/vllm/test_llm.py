"""The synchronous LLM facade (vLLM's offline API)."""

import pytest

from actorllm import LLM, EngineArgs, LoRARequest, SamplingParams
from actorllm.core.errors import InvalidRequestError, RequestTooLongError
from actorllm.worker.profiler import ProfilerError

GREEDY = SamplingParams(temperature=0.0, max_tokens=4)


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
    # no multimodal caches here: vLLM's resets of them have nothing to clear
    assert llm.reset_mm_cache() is None and llm.llm_engine.reset_encoder_cache() is None
    # vLLM 0.32's level 0 and release_kv_cache_memory, then everything back
    llm.sleep(level=0)
    assert llm.is_sleeping()
    llm.release_kv_cache_memory()
    assert llm.wake_up(tags=["scheduling"]) is False  # the KV cache still sleeps
    assert llm.wake_up(tags=["kv_cache"]) is True and not llm.is_sleeping()
    (out,) = llm.generate(["z"], SamplingParams(max_tokens=1), use_tqdm=False)
    assert len(out.outputs[0].token_ids) == 1


def test_every_prompt_form_and_a_mix_give_the_same_tokens(llm):
    ids = llm.get_tokenizer().encode("the same prompt")
    forms = [
        "the same prompt",
        {"prompt": "the same prompt"},
        {"prompt_token_ids": ids},
        {"prompt": "the same prompt", "prompt_token_ids": ids},
    ]
    outs = llm.generate(forms, GREEDY, use_tqdm=False)
    assert len({tuple(o.outputs[0].token_ids) for o in outs}) == 1
    assert [o.prompt for o in outs] == [
        "the same prompt",
        "the same prompt",
        None,
        "the same prompt",
    ]
    assert all(o.prompt_token_ids == ids for o in outs)
    (single,) = llm.generate({"prompt_token_ids": ids}, GREEDY, use_tqdm=False)
    assert single.outputs[0].token_ids == outs[0].outputs[0].token_ids


def test_unsupported_prompts_and_priorities_are_refused_before_anything_runs(llm):
    with pytest.raises(InvalidRequestError) as info:
        llm.generate(["fine", [1, 2, 3]], GREEDY, use_tqdm=False)  # type: ignore[list-item]
    assert info.value.param == "prompt"
    with pytest.raises(InvalidRequestError) as info:
        llm.generate(["a", "b"], GREEDY, priority=[0, 1], use_tqdm=False)  # fcfs engine
    assert info.value.param == "priority"


def test_chat_takes_one_conversation_or_several(llm):
    first = [{"role": "user", "content": "Hello!"}]
    second = [{"role": "user", "content": "Bye."}]
    outs = llm.chat([first, second], GREEDY, use_tqdm=False)
    assert ["Hello!" in outs[0].prompt, "Bye." in outs[1].prompt] == [True, True]
    (alone,) = llm.chat(second, GREEDY, use_tqdm=False)
    assert alone.outputs[0].token_ids == outs[1].outputs[0].token_ids
    go_on = [*first, {"role": "assistant", "content": "Hi, I am"}]
    (cont,) = llm.chat(
        go_on, GREEDY, use_tqdm=False, add_generation_prompt=False, continue_final_message=True
    )
    assert cont.prompt.endswith("Hi, I am")


def test_chat_takes_vllms_priority_and_content_format(llm):
    parts = [
        {
            "role": "user",
            "content": [{"type": "text", "text": "Hello"}, {"type": "text", "text": "there"}],
        }
    ]
    joined = [{"role": "user", "content": "Hello\nthere"}]
    (plain,) = llm.chat(joined, GREEDY, use_tqdm=False)
    (flat,) = llm.chat(parts, GREEDY, use_tqdm=False, chat_template_content_format="string")
    assert flat.prompt == plain.prompt
    template = "{% for m in messages %}{{ m.content[0].text }}{% endfor %}"
    (listed,) = llm.chat(
        joined, GREEDY, False, chat_template=template, chat_template_content_format="openai"
    )
    assert listed.prompt == "Hello\nthere"
    with pytest.raises(ValueError, match="chat_template_content_format"):
        llm.chat(joined, GREEDY, chat_template_content_format="jinja")
    assert llm.chat(joined, GREEDY, use_tqdm=False, priority=0)[0].finished
    with pytest.raises(InvalidRequestError) as info:
        llm.chat(joined, GREEDY, use_tqdm=False, priority=1)  # fcfs engine
    assert info.value.param == "priority"
    for option in ("tokenization_kwargs", "mm_processor_kwargs"):
        with pytest.raises(NotImplementedError, match=rf"^LLM\.chat\({option}=\.\.\.\)"):
            llm.chat(joined, GREEDY, **{option: {"x": 1}})


def test_outputs_carry_the_llms_counter_ids_as_vllms(llm):
    outs = llm.generate(["a", "b"], GREEDY, use_tqdm=False)
    (chatted,) = llm.chat([{"role": "user", "content": "hi"}], GREEDY, use_tqdm=False)
    first = int(outs[0].request_id)
    assert [o.request_id for o in [*outs, chatted]] == [str(first + i) for i in range(3)]


def test_get_tokenizer_is_the_engines(llm):
    assert llm.get_tokenizer() is llm.engine.tokenizer


def test_request_metrics_reach_offline_users(llm):
    before = llm.get_stats().requests
    llm.generate(["metrics", "more metrics"], SamplingParams(max_tokens=3), use_tqdm=False)
    after = llm.get_stats().requests
    assert before is not None and after is not None
    assert after.generation_tokens - before.generation_tokens == 6
    e2e = "e2e_request_latency_seconds"
    assert after.histograms[e2e].count - before.histograms[e2e].count == 2
    assert after.histograms["request_params_max_tokens"].sum >= 6


def test_stream_interval_is_an_engine_setting(llm, tiny_model):
    with pytest.raises(ValueError, match="stream_interval"):
        LLM(tiny_model, stream_interval=0)
    params = SamplingParams(temperature=0.0, max_tokens=7, stream_interval=2)
    with LLM(
        tiny_model, max_model_len=256, kv_cache_memory_bytes=8 * 2**20, stream_interval=3
    ) as held:
        (out,) = held.generate("the same prompt", params, use_tqdm=False)
    (ref,) = llm.generate("the same prompt", params, use_tqdm=False)
    assert out.outputs[0].token_ids == ref.outputs[0].token_ids
    assert len(out.outputs[0].token_ids) == 7


def test_seeded_engine_repeats_sampled_batches(tiny_model):
    """vLLM's offline reproducibility: the same script with the same engine ``seed`` gives
    the same samples, whichever steps the requests land in; another seed, other samples."""
    prompts = ["Hello, my name is", "The capital of France is", "Once upon a time"]
    sampled = SamplingParams(temperature=1.0, max_tokens=8)

    def run(seed: int, calls: int = 1) -> list[list[list[int]]]:
        kw = {"max_model_len": 128, "kv_cache_memory_bytes": 4 * 2**20, "seed": seed}
        with LLM(tiny_model, **kw) as engine:
            return [
                [o.outputs[0].token_ids for o in engine.generate(prompts, sampled, use_tqdm=False)]
                for _ in range(calls)
            ]

    first, second = run(3, calls=2)
    assert run(3) == [first] and first != second  # the next call draws afresh
    assert run(4) != [first]
    assert sampled.seed is None  # the caller's params are not changed


def test_greedy_outputs_do_not_depend_on_the_block_size(tiny_model):
    """16, the CPU default (32) and 128 (vLLM's CPU default): the same greedy tokens, on
    prompts around a block's edge and again from the prefix cache, which then serves
    exactly the prompts' whole blocks."""
    lengths = (5, 31, 32, 33, 70, 130)
    prompts = [{"prompt_token_ids": [3 + (7 * i + n) % 4000 for i in range(n)]} for n in lengths]
    params = SamplingParams(temperature=0.0, max_tokens=40, ignore_eos=True)
    tokens, cached = {}, {}
    for bs in (16, None, 128):
        # float32: "auto" runs bf16 on a host with native bf16, where the attention's
        # order of sums (tiled by block) rounds differently enough to flip a greedy token.
        with LLM(
            tiny_model,
            max_model_len=256,
            kv_cache_memory_bytes=8 * 2**20,
            block_size=bs,
            dtype="float32",
        ) as engine:
            first = engine.generate(prompts, params, use_tqdm=False)
            again = engine.generate(prompts, params, use_tqdm=False)
        tokens[bs] = [o.outputs[0].token_ids for o in first + again]
        cached[bs] = [o.num_cached_tokens for o in again]
    assert tokens[None] == tokens[16] and tokens[128] == tokens[16]
    # every whole block of each prompt but a block-aligned prompt's last (its last token
    # is always computed, so the first output has logits)
    for bs, size in ((16, 16), (None, 32), (128, 128)):
        assert cached[bs] == [(n - 1) // size * size for n in lengths], bs


def test_logprobs_limit_and_the_whole_vocabulary(llm, tiny_model):
    # vLLM: --max-logprobs (20) bounds a request; -1 asks the whole vocabulary, which
    # max_logprobs=-1 allows (sampling_params.py, _validate_logprobs).
    with pytest.raises(InvalidRequestError, match="greater than max allowed: 20"):
        llm.generate("hi", SamplingParams(logprobs=21, max_tokens=1), use_tqdm=False)
    with LLM(
        tiny_model, max_model_len=64, kv_cache_memory_bytes=4 * 2**20, max_logprobs=-1
    ) as whole:
        params = SamplingParams(logprobs=-1, prompt_logprobs=-1, max_tokens=1, temperature=0.0)
        (out,) = whole.generate("hi there", params, use_tqdm=False)
        vocab = whole.get_tokenizer().vocab_size
        (position,) = out.outputs[0].logprobs
        assert len(position) >= vocab - 1  # every token (the sampled one merged in)
        assert all(p is None or len(p) >= vocab - 1 for p in out.prompt_logprobs)


@pytest.mark.parametrize("name", ["reward", "start_draft_weight_update"])
def test_methods_not_built_are_refused_by_name(llm, name):
    # As AsyncLLM does (compat/vllm/not_built.py): not an AttributeError.
    with pytest.raises(NotImplementedError, match=rf"^LLM\.{name}: "):
        getattr(llm, name)(["hi"])
    with pytest.raises(AttributeError, match="no_such_method"):
        llm.no_such_method  # noqa: B018


def test_beam_search_returns_the_best_beams_with_their_prompt(llm):
    from actorllm.sampling_params import BeamSearchParams

    prompts = [{"prompt": "hi"}, {"prompt_token_ids": [5, 6, 7]}]
    outs = llm.beam_search(prompts, BeamSearchParams(beam_width=2, max_tokens=3, ignore_eos=True))
    assert len(outs) == 2 and all(len(o.sequences) == 2 for o in outs)
    first, second = outs
    assert second.sequences[0].tokens[:3] == [5, 6, 7]
    assert all(len(s.tokens) == 3 + 3 for s in second.sequences)
    assert first.sequences[0].cum_logprob >= first.sequences[1].cum_logprob
    assert first.sequences[0].text == llm.get_tokenizer().decode(first.sequences[0].tokens)
    with pytest.raises(TypeError, match="BeamSearchParams"):
        llm.beam_search(prompts, GREEDY)


def test_beam_search_leaves_a_beam_that_ran_out_of_steps_unfinished(llm):
    # vLLM's LLM.beam_search sets finish_reason only on beams that ended on EOS ("stop");
    # one cut by max_tokens keeps None (only the online answer calls it "length").
    from actorllm.sampling_params import BeamSearchParams

    (out,) = llm.beam_search(["hi"], BeamSearchParams(beam_width=2, max_tokens=2, ignore_eos=True))
    assert [s.finish_reason for s in out.sequences] == [None, None]
    assert [s.stop_reason for s in out.sequences] == [None, None]


def test_lora_request_none_is_no_adapter_and_an_adapter_needs_enable_lora(llm):
    (out,) = llm.generate("hi", GREEDY, use_tqdm=False, lora_request=None)
    assert len(out.outputs[0].token_ids) == 4
    (out,) = llm.chat(
        [{"role": "user", "content": "hi"}], GREEDY, use_tqdm=False, lora_request=None
    )
    assert out.finished
    with pytest.raises(InvalidRequestError, match="must be a LoRARequest"):
        llm.generate("hi", GREEDY, use_tqdm=False, lora_request=object())
    adapter = LoRARequest("sql", 1, "/adapters/sql")
    with pytest.raises(InvalidRequestError, match="'sql' requested, but LoRA is not enabled"):
        llm.chat([{"role": "user", "content": "hi"}], GREEDY, lora_request=adapter)
    with pytest.raises(NotImplementedError, match="tokenization_kwargs"):
        llm.generate("hi", GREEDY, use_tqdm=False, tokenization_kwargs={"truncation": True})


@pytest.mark.parametrize("name", ["encode", "embed", "classify"])
def test_pooling_methods_on_a_generative_model_name_the_model(llm, name):
    with pytest.raises(InvalidRequestError) as info:
        getattr(llm, name)(["hi"])
    assert info.value.param == "model"


def test_a_tokenizer_named_by_directory_is_loaded_from_it(tmp_path):
    """vLLM's ``tokenizer=`` names a directory or hub id: the engine loads the tokenizer
    from it, so text prompts tokenize and outputs detokenize (here for a model directory
    without tokenizer files, as a GGUF file has none)."""
    from actorllm.demo import demo_tokenizer_path
    from tests.helpers.models import make_tiny_checkpoint

    path = make_tiny_checkpoint(
        tmp_path, "llama", vocab_size=4096, eos_token_id=0, max_position_embeddings=1024
    )
    with LLM(
        str(path), tokenizer=str(demo_tokenizer_path()), max_model_len=64,
        kv_cache_memory_bytes=4 * 2**20,
    ) as llm:  # fmt: skip
        tok = llm.get_tokenizer()
        (out,) = llm.generate("hello there", GREEDY, use_tqdm=False)
    assert not isinstance(tok, str) and tok.name_or_path == str(demo_tokenizer_path())
    assert out.prompt_token_ids == tok("hello there")["input_ids"]
    ids = out.outputs[0].token_ids
    assert len(ids) == 4 and out.outputs[0].text == tok.decode(ids, skip_special_tokens=True)


def test_llm_engine_is_an_llmengine_on_the_same_engine(llm):
    """vLLM's ``llm.llm_engine`` / ``llm.model_config`` / ``llm.engine_class``: scripts
    reach the model's settings and the step API through them; no second engine starts."""
    eng = llm.llm_engine
    assert eng is llm.llm_engine and type(eng) is llm.engine_class
    assert eng.engine is llm.engine and eng.get_tokenizer() is llm.get_tokenizer()
    assert llm.model_config.max_model_len == eng.model_config.max_model_len == 256
    prompt = {"prompt_token_ids": [5, 6, 7]}
    eng.add_request("via-llm-engine", prompt, GREEDY)
    outs = []
    while eng.has_unfinished_requests():
        outs += eng.step()
    (stepped,) = [o for o in outs if o.finished]
    (generated,) = llm.generate(prompt, GREEDY, use_tqdm=False)
    assert stepped.outputs[0].token_ids == generated.outputs[0].token_ids


def test_reset_prefix_cache_refuses_vllms_options_when_on(llm):
    assert llm.reset_prefix_cache(reset_running_requests=False, reset_connector=False)
    for name in ("reset_running_requests", "reset_connector"):
        with pytest.raises(InvalidRequestError, match=name) as err:
            llm.reset_prefix_cache(**{name: True})
        assert err.value.param == name
    assert llm.reset_prefix_cache()  # the engine goes on


def test_apply_model_runs_a_function_on_each_workers_model(llm):
    """vLLM's ``LLM.apply_model``: one result per worker, from its torch module."""
    (count,) = llm.apply_model(lambda model: sum(p.numel() for p in model.parameters()))
    (expected,) = llm.collective_rpc(
        lambda worker: sum(p.numel() for p in worker.get_model().parameters())
    )
    assert count == expected > 0
    with pytest.raises(ZeroDivisionError):
        llm.apply_model(lambda model: 1 / 0)
    assert llm.apply_model(lambda model: type(model).__name__)  # the engine goes on


def test_from_engine_args_is_vllms_constructor(tiny_model):
    args = EngineArgs(model=tiny_model, max_model_len=128, kv_cache_memory_bytes=4 * 2**20)
    with LLM.from_engine_args(args) as built:
        assert isinstance(built, LLM) and built.model_config.max_model_len == 128
    with pytest.raises(TypeError, match="EngineArgs"):
        LLM.from_engine_args({"model": tiny_model})  # type: ignore[arg-type]


def test_start_profile_takes_vllms_options_at_their_defaults(llm):
    for option, value in (
        ("profile_prefix", "run1"),
        ("delay_iterations", 2),
        ("max_iterations", 5),
    ):
        with pytest.raises(NotImplementedError, match=rf"^LLM\.start_profile\({option}=\.\.\.\)"):
            llm.start_profile(**{option: value})
    with pytest.raises(ProfilerError, match="profiler_dir"):  # honoured: on to the profiler
        llm.start_profile(None, delay_iterations=0, max_iterations=0)
