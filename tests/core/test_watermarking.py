"""A request's watermarking resolved as vLLM's _check_supports_watermarking does: on when
the engine has a watermark and the request samples, off (with vLLM's warning, once) where
it cannot be, never refused; the input processor stores the answer on the request."""

from __future__ import annotations

import logging

import pytest

from actorllm.core import watermarking
from actorllm.core.input_processor import InputProcessor
from actorllm.core.sampling_params import SamplingParams
from actorllm.core.watermark_config import WatermarkConfig
from actorllm.core.watermarking import resolve_beam_search, resolve_watermarking
from actorllm.testing.engine_harness import demo_tokenizer

ON = WatermarkConfig(key=3)


@pytest.fixture(autouse=True)
def _fresh_warnings(monkeypatch):
    monkeypatch.setattr(watermarking, "_warned", set())


@pytest.mark.parametrize(
    ("config", "asked", "temperature", "resolved"),
    [
        (ON, None, 1.0, True),
        (ON, True, 0.5, True),
        (ON, False, 1.0, False),
        (ON, None, 0.0, False),  # greedy: ordinary greedy sampling
        (None, None, 1.0, False),
        (None, True, 1.0, False),  # asked, none configured: runs unwatermarked
    ],
)
def test_resolution(config, asked, temperature: float, resolved: bool) -> None:
    params = SamplingParams(watermarking=asked, temperature=temperature)
    assert resolve_watermarking(config, params) is resolved


def test_each_warning_is_said_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        for _ in range(3):
            resolve_watermarking(None, SamplingParams(watermarking=True))
            resolve_watermarking(ON, SamplingParams(temperature=0.0))
            resolve_beam_search(ON, None)
    texts = [r.getMessage() for r in caplog.records]
    assert texts == [watermarking.NO_CONFIG, watermarking.GREEDY, watermarking.BEAM_SEARCH]


def test_opting_out_says_nothing(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING):
        assert not resolve_beam_search(ON, False)
        assert not resolve_watermarking(ON, SamplingParams(watermarking=False, temperature=0))
    assert not caplog.records


def test_the_input_processor_stores_the_answer_on_the_request_only() -> None:
    inputs = InputProcessor(demo_tokenizer(), vocab_size=4096, max_model_len=32, watermark=ON)
    given = SamplingParams()
    child = inputs.process("a", "hi", given).children[0].params
    assert child.watermarking is True and given.watermarking is None
    greedy = inputs.process("b", "hi", SamplingParams(temperature=0)).children[0].params
    assert greedy.watermarking is False
    # A replay processes the stored params again: the answer stays.
    assert inputs.fan_out("a", child)[0].params.watermarking is True
