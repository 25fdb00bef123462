"""Routed experts (vLLM 0.32's "routing replay" output): which experts each token was
routed to in every MoE layer, for RL trainers that replay the routing.

The worker reports, per request and step, the rows of the positions it ran
(:class:`RoutedRows`); the scheduler writes them into the request's
:class:`RoutedExpertsLog` by position, so a position run again (a chunk after a
preemption, a recompute after a crash replay) overwrites its row with the same ids. A
finished request reports rows ``[routed_experts_prompt_start, num_tokens - 1)``: the last
sampled token has not been through the model yet.

The core imports no numpy: rows travel as bytes of ``dtype`` (uint8 up to 256 experts,
else uint16, as vLLM) with their per-token shape ``[layers, top_k]``;
:class:`RoutedExperts` turns into a numpy array ``[tokens, layers, top_k]`` on demand.
"""

from __future__ import annotations

from typing import Any

import msgspec


def routed_dtype(num_experts: int) -> str:
    """vLLM's element type for expert ids."""
    return "uint8" if num_experts <= 256 else "uint16"


class RoutedRows(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """Expert ids of consecutive positions ``[start, start + n)`` of one request."""

    start: int
    layers: int
    top_k: int
    dtype: str  # "uint8" | "uint16"
    data: bytes  # [n, layers, top_k] in C order

    @property
    def row_bytes(self) -> int:
        return self.layers * self.top_k * (1 if self.dtype == "uint8" else 2)


class RoutedExperts(msgspec.Struct, frozen=True, kw_only=True, array_like=True):
    """A finished request's routed experts, ``[tokens, layers, top_k]``: what vLLM's
    ``CompletionOutput.routed_experts`` holds (there an ``np.ndarray``; ``np.asarray``
    of this is the same array)."""

    tokens: int
    layers: int
    top_k: int
    dtype: str
    data: bytes

    @property
    def shape(self) -> tuple[int, int, int]:
        return (self.tokens, self.layers, self.top_k)

    def numpy(self) -> Any:
        import numpy as np  # the core's only numpy use, on demand at the edge

        return np.frombuffer(self.data, dtype=self.dtype).reshape(self.shape).copy()

    def __array__(self, dtype: Any = None, copy: Any = None) -> Any:
        arr = self.numpy()
        return arr if dtype is None else arr.astype(dtype)

    def tolist(self) -> list[list[list[int]]]:
        return list(self.numpy().tolist())


class RoutedExpertsLog:
    """One request's rows by position (positions never run stay zero)."""

    __slots__ = ("buf", "dtype", "layers", "row_bytes", "top_k")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.layers = self.top_k = self.row_bytes = 0
        self.dtype = "uint8"

    def write(self, rows: RoutedRows) -> None:
        self.layers, self.top_k, self.dtype = rows.layers, rows.top_k, rows.dtype
        self.row_bytes = rb = rows.row_bytes
        lo = rows.start * rb
        hi = lo + len(rows.data)
        if hi > len(self.buf):
            self.buf.extend(bytes(hi - len(self.buf)))
        self.buf[lo:hi] = rows.data

    def take(self, start: int, end: int) -> RoutedExperts | None:
        """Rows ``[start, end)``, or None when nothing was recorded."""
        if not self.row_bytes:
            return None
        end = max(end, start)
        rb = self.row_bytes
        data = bytes(self.buf[start * rb : end * rb]).ljust((end - start) * rb, b"\0")
        return RoutedExperts(
            tokens=end - start, layers=self.layers, top_k=self.top_k, dtype=self.dtype, data=data
        )


def trimmed(routed: RoutedExperts, tokens: int) -> RoutedExperts:
    """The first ``tokens`` rows (tokens dropped by a stop string drop their rows)."""
    tokens = max(0, min(tokens, routed.tokens))
    rb = routed.layers * routed.top_k * (1 if routed.dtype == "uint8" else 2)
    return RoutedExperts(
        tokens=tokens,
        layers=routed.layers,
        top_k=routed.top_k,
        dtype=routed.dtype,
        data=routed.data[: tokens * rb],
    )
