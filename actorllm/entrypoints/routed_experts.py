"""Routed experts over HTTP, as vLLM sends them: the base64 of an ``np.save`` of the
``[tokens, layers, top_k]`` array (uint8, or uint16 past 256 experts), on a choice's final
output; null otherwise (or when the server was not started with
--enable-return-routed-experts)."""

from __future__ import annotations

import base64
import io

import numpy as np

from actorllm.core.routed_experts import RoutedExperts


def routed_experts_b64(routed: RoutedExperts | None) -> str | None:
    if routed is None:
        return None
    with io.BytesIO() as buffer:
        np.save(buffer, routed.numpy(), allow_pickle=False)
        return base64.b64encode(buffer.getbuffer()).decode("ascii")
