"""vLLM's ``ModelRegistry``: the supported architectures; ``register_model`` refused."""

import pytest

from actorllm import ModelRegistry
from actorllm.models.registry import supported_architectures


def test_supported_archs_are_the_engines():
    assert ModelRegistry.get_supported_archs() == supported_architectures()


@pytest.mark.parametrize("model_cls", [object, "my_pkg.models:MyModelForCausalLM"])
def test_register_model_refuses_by_name(model_cls):
    with pytest.raises(NotImplementedError, match=r"register_model.*'MyModelForCausalLM'"):
        ModelRegistry.register_model("MyModelForCausalLM", model_cls)
    assert "MyModelForCausalLM" not in ModelRegistry.get_supported_archs()
