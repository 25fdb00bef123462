"""Which kernel a prepacked linear's rows went to: a few-rows kernel's ``linear`` or
oneDNN's ``_linear_pointwise``, each call recorded with its row count."""

from __future__ import annotations

from types import ModuleType

import pytest
import torch


def spy_linears(
    monkeypatch: pytest.MonkeyPatch, kernel: ModuleType, label: str
) -> list[tuple[str, int]]:
    """Record ``(label, rows)`` for each call of ``kernel.linear`` and ``("onednn",
    rows)`` for each oneDNN product, in order; both still compute."""
    calls: list[tuple[str, int]] = []
    plain, onednn = kernel.linear, torch.ops.mkldnn._linear_pointwise

    def on_kernel(rows: torch.Tensor, *args: object) -> torch.Tensor:
        calls.append((label, rows.shape[0]))
        return plain(rows, *args)  # type: ignore[no-any-return]

    def on_onednn(rows: torch.Tensor, *args: object) -> torch.Tensor:
        calls.append(("onednn", rows.shape[0]))
        return onednn(rows, *args)

    monkeypatch.setattr(kernel, "linear", on_kernel)
    monkeypatch.setattr(torch.ops.mkldnn, "_linear_pointwise", on_onednn)
    return calls
