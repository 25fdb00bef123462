"""vLLM's environment variables that change what an engine computes and that this engine
does not build: refused by name when an engine opens, never silently ignored.

(The ones it honours are read where they act: ``VLLM_CPU_KVCACHE_SPACE``,
``VLLM_CPU_INT4_W4A8``, ``VLLM_PP_LAYER_PARTITION``, ...)"""

from __future__ import annotations

import os
from collections.abc import Mapping

from actorllm.engine.config.errors import EngineConfigError

BATCH_INVARIANT_ENV = "VLLM_BATCH_INVARIANT"


def check_environment(environ: Mapping[str, str] = os.environ) -> None:
    """``VLLM_BATCH_INVARIANT`` (an integer, as vLLM reads it) set to anything but 0 is
    refused: vLLM's batch-invariant mode swaps in kernels whose results do not depend on
    the batch, and here attention's prefill kernel sums in another order than its decode
    kernel, and GEMMs beyond the native kernels' row counts are oneDNN's.

    >>> check_environment({"VLLM_BATCH_INVARIANT": "0"})
    >>> check_environment({"VLLM_BATCH_INVARIANT": "1"})
    Traceback (most recent call last):
    ...
    actorllm.engine.config.errors.EngineConfigError: VLLM_BATCH_INVARIANT: ...
    """
    raw = environ.get(BATCH_INVARIANT_ENV, "").strip()
    if not raw:
        return
    try:
        on = bool(int(raw))
    except ValueError:
        raise EngineConfigError(BATCH_INVARIANT_ENV, f"must be 0 or 1, got {raw!r}.") from None
    if on:
        raise EngineConfigError(
            BATCH_INVARIANT_ENV,
            "batch-invariant mode is not built here (attention's prefill and decode kernels "
            "sum in different orders; GEMMs beyond the native kernels' row counts are "
            "oneDNN's, whose sums depend on the batch). Unset it or set it to 0.",
        )
