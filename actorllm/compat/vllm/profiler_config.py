"""vLLM's ``profiler_config`` (``--profiler-config JSON``) as ``profiler_dir``.

Here the one profiler is torch's, writing to ``profiler_dir`` from ``start_profile()`` to
``stop_profile()``. vLLM's ``{"profiler": "torch", "torch_profiler_dir": DIR}`` is that;
``{}`` or ``{"profiler": null}`` leaves profiling off. The CUDA and Proton profilers, and
options that shape a torch trace differently (activities, stacks, shapes, iteration
schedules), are refused by name, except at the values that ask for what happens here anyway.

    >>> profiler_config_kwargs({"profiler": "torch", "torch_profiler_dir": "/tmp/traces"})
    {'profiler_dir': '/tmp/traces'}
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from actorllm.engine.config.errors import EngineConfigError

_NAME = "profiler_config"
# {key: the value that asks for what happens here} for the keys accepted only at it: no
# Proton options, no iteration window (the trace runs from start to stop).
_SAME = {
    "proton_profiler_dir": "",
    "proton_context": "shadow",
    "proton_data": "tree",
    "proton_backend": None,
    "proton_mode": None,
    "proton_hook": None,
    "proton_output_format": None,
    "proton_graph_attribution": False,
    "delay_iterations": 0,
    "max_iterations": 0,
}


def profiler_config_kwargs(raw: Mapping[str, Any]) -> dict[str, Any]:
    """``EngineConfig`` keyword arguments of vLLM's ``ProfilerConfig`` object."""
    config = dict(raw)
    profiler = config.pop("profiler", None)
    directory = config.pop("torch_profiler_dir", "") or ""
    for key, value in config.items():
        if key not in _SAME:
            raise EngineConfigError(
                _NAME, f"{key!r} is not supported (profiler and torch_profiler_dir are read)."
            )
        if value != _SAME[key]:
            raise EngineConfigError(_NAME, f"{key} {value!r} is not supported.")
    if profiler is None:
        if directory:
            raise EngineConfigError(_NAME, "torch_profiler_dir needs profiler 'torch'.")
        return {}
    if profiler != "torch":
        raise EngineConfigError(_NAME, f"profiler {profiler!r} is not built (only 'torch').")
    if not directory:
        raise EngineConfigError(_NAME, "profiler 'torch' needs torch_profiler_dir.")
    return {"profiler_dir": str(directory)}
