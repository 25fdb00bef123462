"""The builds of a native CPU kernel (``actorllm/kernels/csrc``) that its tests run: as built
for this host, without AVX-512 (the AVX2 paths where the host has AVX2 and FMA) and the
portable C path (neither). On a host without AVX-512 the first two are the same build; on
one without AVX2 all three are."""

from __future__ import annotations

from collections.abc import Callable
from types import ModuleType

import pytest

BUILDS: dict[str, tuple[str, ...]] = {
    "host": (),
    "avx2": ("-mno-avx512f",),
    "portable": ("-mno-avx512f", "-mno-avx2"),
}


def use_build(
    module: ModuleType,
    kernel: Callable[[tuple[str, ...]], object],
    name: str,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Make ``module``'s entry points call build ``name`` (its ``_BUILD_FLAGS``); skip the
    test when ``kernel(flags)`` (the module's builder) could not build it."""
    flags = BUILDS[name]
    if not flags:
        return
    monkeypatch.setattr(module, "_BUILD_FLAGS", flags)
    if kernel(flags) is None:
        pytest.skip(f"the compiler does not take {' '.join(flags)}")
