"""vLLM's public names for features not built: they import, and refuse by name when used."""

import pytest

from actorllm.inputs import DataPrompt, ExplicitEncoderDecoderPrompt


def test_encoder_decoder_prompts_refuse_by_name():
    with pytest.raises(NotImplementedError, match="ExplicitEncoderDecoderPrompt: encoder-dec"):
        ExplicitEncoderDecoderPrompt(encoder_prompt="a", decoder_prompt="b")


def test_data_prompts_refuse_by_name():
    with pytest.raises(NotImplementedError, match="DataPrompt: IO processor plugins"):
        DataPrompt(data=[1.0], data_format="pixels")
