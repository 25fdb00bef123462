"""Every kernel source in ``csrc/`` compiles on this host (its ISA paths or their stubs):
a failed build falls back to the torch path with a log line by design
(tests/kernels/test_native.py), so without this a compile error in a kernel would only
turn its tests into skips."""

from __future__ import annotations

from pathlib import Path

import pytest

from actorllm.kernels import native

CSRC = Path(native.__file__).with_name("csrc")


def test_every_kernel_source_builds_here() -> None:
    if native.library("paged_decode") is None:
        pytest.skip("no working C compiler here (or native kernels switched off)")
    sources = sorted(p.stem for p in CSRC.glob("*.c"))
    assert len(sources) >= 16
    assert [name for name in sources if native.library(name) is None] == []
