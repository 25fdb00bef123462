"""``EngineArgs`` / ``AsyncEngineArgs``: vLLM's keyword names, each honoured or refused by
name."""

import warnings

import pytest

from actorllm import AsyncEngineArgs, EngineArgs, EngineConfig, LLMEngine, SamplingParams
from actorllm.engine.config.engine_config import EngineConfigError


def test_fields_map_onto_the_engine_config():
    args = EngineArgs(model="/m", max_model_len=256, max_num_seqs=4, tensor_parallel_size=1)
    assert (args.model, args.max_model_len, args.max_num_seqs) == ("/m", 256, 4)
    assert args.block_size == EngineConfig().block_size  # not given: the default
    config = args.create_engine_config()
    assert isinstance(config, EngineConfig)
    assert (config.model, config.max_model_len, config.max_num_seqs) == ("/m", 256, 4)
    assert EngineArgs().create_engine_config().model is None  # the demo model
    args.max_model_len = 512  # set later: given all the same
    assert args.create_engine_config().max_model_len == 512
    with pytest.raises(AttributeError, match="'max_modle_len'"):
        args.max_modle_len = 512


def test_an_unknown_field_is_refused_by_name():
    with pytest.raises(TypeError, match="'max_modle_len'"):
        EngineArgs(max_modle_len=256)
    with pytest.raises(TypeError, match="'enable_log_requests'"):  # AsyncEngineArgs' only
        EngineArgs(enable_log_requests=True)


def test_vllm_features_not_built_are_refused_unless_off():
    args = EngineArgs(enable_lora=False, quantization=None, kv_cache_dtype="auto", max_logprobs=20)
    args.create_engine_config()
    assert EngineArgs(enable_lora=True, max_loras=2).create_engine_config().max_loras == 2
    assert EngineArgs(kv_cache_dtype="fp8").create_engine_config().kv_cache_dtype == "fp8"
    for kwargs in ({"kv_cache_dtype": "fp8_inc"}, {"kv_cache_dtype": "fp8_ds_mla"}):
        with pytest.raises(EngineConfigError) as info:
            EngineArgs(**kwargs).create_engine_config()
        assert info.value.param == next(iter(kwargs))


def test_an_unknown_quantization_method_is_refused_with_vllms_message():
    with pytest.raises(EngineConfigError, match="Unknown quantization method: bogus") as info:
        EngineArgs(quantization="bogus").create_engine_config()
    assert info.value.param == "quantization"


def test_a_field_with_no_meaning_here_warns_naming_it():
    with pytest.warns(UserWarning, match="trust_remote_code=True has no effect"):
        EngineArgs(trust_remote_code=True)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        EngineArgs(trust_remote_code=False)  # asks for nothing: quiet


def test_values_are_validated_by_the_engine_config():
    with pytest.raises(EngineConfigError) as info:
        EngineArgs(max_num_seqs=0).create_engine_config()
    assert info.value.param == "max_num_seqs"


def test_vllm_spellings_of_engine_settings():
    config = EngineArgs(
        structured_outputs_config={"backend": "guidance"},
        kv_transfer_config={"kv_connector": "OffloadingConnector", "kv_role": "kv_both"},
    ).create_engine_config()
    assert config.structured_outputs_backend == "guidance"
    assert config.kv_connector == "offload"
    config = EngineArgs(kv_offloading_size=0.5, data_parallel_size_local=1).create_engine_config()
    assert config.kv_offload_host_bytes == 2**29
    with pytest.raises(EngineConfigError) as info:
        EngineArgs(kv_transfer_config={"kv_connector": "NixlConnector"}).create_engine_config()
    assert info.value.param == "kv_transfer_config"


def test_async_engine_args_request_logging():
    assert AsyncEngineArgs(enable_log_requests=True).enable_log_requests
    assert not AsyncEngineArgs().enable_log_requests
    assert not AsyncEngineArgs(disable_log_requests=True).enable_log_requests  # older name
    assert AsyncEngineArgs(disable_log_stats=True).disable_log_stats


def test_llm_engine_from_engine_args(tiny_model):
    args = EngineArgs(
        model=tiny_model,
        max_model_len=128,
        kv_cache_memory_bytes=4 * 2**20,
        disable_log_stats=True,
    )
    with LLMEngine.from_engine_args(args) as engine:
        assert engine.get_model_config().max_model_len == 128
        engine.add_request("a", "Hello", SamplingParams(temperature=0.0, max_tokens=4))
        outs = []
        while engine.has_unfinished_requests():
            outs += engine.step()
        assert outs[-1].finished and len(outs[-1].outputs[0].token_ids) == 4
    with pytest.raises(NotImplementedError, match="enable_multiprocessing"):
        LLMEngine.from_engine_args(args, enable_multiprocessing=True)


def test_vllm_command_line_helpers():
    import argparse

    parser = AsyncEngineArgs.add_cli_args(argparse.ArgumentParser())
    args = parser.parse_args(
        ["--model", "/m", "--max-model-len", "256", "--disable-log-stats", "--enable-log-requests"]
    )
    engine_args = AsyncEngineArgs.from_cli_args(args)
    assert (engine_args.model, engine_args.max_model_len) == ("/m", 256)
    assert engine_args.disable_log_stats and engine_args.enable_log_requests
    with pytest.warns(UserWarning, match="--trust-remote-code has no effect"):
        AsyncEngineArgs.from_cli_args(parser.parse_args(["--trust-remote-code"]))
    lora = AsyncEngineArgs.from_cli_args(parser.parse_args(["--enable-lora", "--max-loras", "3"]))
    assert lora.enable_lora and lora.max_loras == 3
    with pytest.raises(ValueError, match="--enable-lora-bias"):
        AsyncEngineArgs.from_cli_args(parser.parse_args(["--enable-lora-bias"]))


def test_llm_keywords_take_vllms_engine_arguments_as_engine_args_does():
    """``LLM(model, **kwargs)`` / ``AsyncEngine.open``: vLLM's engine arguments that are not
    EngineConfig fields are classified as EngineArgs classifies them."""
    from actorllm.compat.vllm.args import engine_config

    def _as_config(model, kwargs):  # LLM(model, **kwargs) translates its keywords so
        return engine_config(model, **kwargs)

    from actorllm.engine.config.engine_config import EngineConfigError

    with pytest.warns(UserWarning, match="trust_remote_code=True has no effect"):
        config = _as_config("/m", {"trust_remote_code": True, "max_model_len": 128})
    assert (config.model, config.max_model_len) == ("/m", 128)
    assert _as_config(None, {"disable_log_stats": True}).model is None  # vLLM LLM's default
    with pytest.raises(EngineConfigError, match="disable_log_stats"):
        _as_config(None, {"disable_log_stats": False})
    assert _as_config(None, {"enable_lora": True, "max_lora_rank": 64}).max_lora_rank == 64
    with pytest.raises(EngineConfigError, match="max_cpu_loras"):
        _as_config(None, {"enable_lora": True, "max_loras": 4, "max_cpu_loras": 2})
    with pytest.raises(TypeError, match="'no_such_field'"):
        _as_config(None, {"no_such_field": 1})


def test_engine_args_are_a_dataclass_as_vllms():
    """vLLM scripts build ``LLM(**dataclasses.asdict(engine_args))``."""
    import dataclasses

    args = EngineArgs(model="/m", max_model_len=256)
    assert dataclasses.is_dataclass(args) and dataclasses.is_dataclass(AsyncEngineArgs)
    d = dataclasses.asdict(args)
    assert (d["model"], d["max_model_len"], d["block_size"]) == ("/m", 256, None)  # as vLLM
    assert d["structured_outputs_config"] is None and d["disable_log_stats"] is False
    assert "enable_log_requests" in {f.name for f in dataclasses.fields(AsyncEngineArgs)}
    again = EngineArgs(**d)  # every field, unset ones at their defaults: the same config
    assert again.create_engine_config() == args.create_engine_config()
    changed = dataclasses.replace(args, max_num_seqs=8)
    assert (changed.max_num_seqs, changed.max_model_len) == (8, 256)


def test_llm_takes_the_whole_asdict_and_logs_stats_unless_disabled(tiny_model, monkeypatch, caplog):
    import dataclasses
    import logging
    import time

    from actorllm import LLM
    from actorllm.compat.vllm import bridge

    monkeypatch.setattr(bridge, "STATS_INTERVAL_S", 0.05)
    args = EngineArgs(model=tiny_model, max_model_len=128, kv_cache_memory_bytes=4 * 2**20)
    caplog.set_level(logging.INFO, logger="actorllm")
    with LLM(**dataclasses.asdict(args)) as llm:  # disable_log_stats=False: a periodic line
        out = llm.generate(["Hi"], SamplingParams(temperature=0.0, max_tokens=3), use_tqdm=False)
        assert len(out[0].outputs[0].token_ids) == 3
        deadline = time.monotonic() + 10
        while "throughput" not in caplog.text and time.monotonic() < deadline:
            time.sleep(0.05)
    assert "throughput" in caplog.text
    caplog.clear()
    with LLM(tiny_model, max_model_len=128, kv_cache_memory_bytes=4 * 2**20) as llm:
        llm.generate(["Hi"], SamplingParams(temperature=0.0, max_tokens=3), use_tqdm=False)
        time.sleep(0.3)  # vLLM's LLM defaults disable_log_stats to True: no line
    assert "throughput" not in caplog.text


def test_vllms_queue_limits_reach_the_engine_config():
    config = EngineArgs(max_num_queued_reqs=8, max_num_queued_tokens=0).create_engine_config()
    assert (config.max_num_queued_reqs, config.max_num_queued_tokens) == (8, 0)
    with pytest.raises(EngineConfigError, match="max_num_queued_reqs"):
        EngineArgs(max_num_queued_reqs=-1).create_engine_config()
