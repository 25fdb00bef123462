"""vLLM's ``profiler_config`` is ``profiler_dir`` in every form; what it cannot be is
refused naming it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import pytest

from actorllm import EngineConfig
from actorllm.compat.vllm import args
from actorllm.engine.config.engine_config import EngineConfigError
from tests.compat.vllm.test_args import FORMS

Form = Callable[..., EngineConfig]


@pytest.mark.parametrize("form", FORMS)
def test_the_torch_profiler_dir_is_the_profiler_dir(form: Form) -> None:
    config = form(profiler_config={"profiler": "torch", "torch_profiler_dir": "/tmp/traces"})
    assert config.profiler_dir == "/tmp/traces"
    assert form(profiler_config={"profiler": None}).profiler_dir is None


@pytest.mark.parametrize(
    ("value", "said"),
    [
        ({"profiler": "cuda"}, "not built"),
        ({"profiler": "torch"}, "needs torch_profiler_dir"),
        ({"torch_profiler_dir": "/tmp/t"}, "needs profiler 'torch'"),
        ({"profiler": "torch", "torch_profiler_dir": "/t", "max_iterations": 3}, "max_iterations"),
        (
            {"profiler": "torch", "torch_profiler_dir": "/t", "torch_profiler_with_flops": 1},
            "flops",
        ),
    ],
)
def test_what_is_not_built_is_refused(value: dict[str, Any], said: str) -> None:
    with pytest.raises(EngineConfigError, match=said) as info:
        args.translate({"profiler_config": value})
    assert info.value.param == "profiler_config"
