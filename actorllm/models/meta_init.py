"""Build modules on the meta device without running their initialisers.

``nn.Linear``, ``nn.Embedding`` and ``nn.LayerNorm`` fill their parameters in ``__init__``.
On the meta device there is nothing to fill, yet ``nn.Embedding``'s ``normal_`` there is
dispatched through torch's Python references, whose first call imports ``torch._dynamo``:
about 2 s of every engine start on a CPU, for values the loader overwrites anyway.

:func:`on_meta` is ``with torch.device("meta")`` with torch's initialisers skipped for meta
tensors. The patch is process-wide while any thread is inside (threads build replicas and
draft models at the same time); a real tensor passed to an initialiser meanwhile (the
host's own code) is initialised as usual.
"""

from __future__ import annotations

import contextlib
import functools
import threading
from collections.abc import Callable, Iterator
from typing import Any

import torch
from torch.nn import init

_INITIALISERS = (
    "uniform_",
    "normal_",
    "trunc_normal_",
    "constant_",
    "ones_",
    "zeros_",
    "xavier_uniform_",
    "xavier_normal_",
    "kaiming_uniform_",
    "kaiming_normal_",
    "orthogonal_",
)

_lock = threading.Lock()
_inside = 0
_originals: dict[str, Callable[..., Any]] = {}


def _skip_on_meta(original: Callable[..., Any]) -> Callable[..., Any]:
    @functools.wraps(original)
    def initialise(tensor: torch.Tensor, *args: Any, **kwargs: Any) -> Any:
        if tensor.is_meta:
            return tensor
        return original(tensor, *args, **kwargs)

    return initialise


@contextlib.contextmanager
def on_meta() -> Iterator[None]:
    """Modules made inside have their parameters on the meta device, uninitialised."""
    global _inside
    with _lock:
        if _inside == 0:
            for name in _INITIALISERS:
                _originals[name] = getattr(init, name)
                setattr(init, name, _skip_on_meta(_originals[name]))
        _inside += 1
    try:
        with torch.device("meta"):
            yield
    finally:
        with _lock:
            _inside -= 1
            if _inside == 0:
                for name, original in _originals.items():
                    setattr(init, name, original)
                _originals.clear()
