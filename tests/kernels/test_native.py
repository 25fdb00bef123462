"""Building native kernels: cached per source and CPU, switched off by the environment, and a
failed build is a log line and the torch path, never an error."""

from __future__ import annotations

import logging
from collections.abc import Iterator
from pathlib import Path

import pytest

from actorllm.kernels import native


@pytest.fixture(autouse=True)
def fresh(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Iterator[None]:
    monkeypatch.setenv("ACTORLLM_CACHE_DIR", str(tmp_path))
    native.library.cache_clear()
    yield
    native.library.cache_clear()


def test_builds_once_into_the_cache_dir(tmp_path: Path) -> None:
    lib = native.library("paged_decode")
    if lib is None:
        pytest.skip("no working C compiler here")
    built = list((tmp_path / "native").glob("paged_decode-*.so"))
    assert len(built) == 1 and hasattr(lib, "paged_decode")
    mtime = built[0].stat().st_mtime_ns
    native.library.cache_clear()
    assert native.library("paged_decode") is not None
    assert built[0].stat().st_mtime_ns == mtime  # loaded from the cache, not rebuilt


def test_switched_off_by_the_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ACTORLLM_NATIVE_KERNELS", "0")
    assert native.library("paged_decode") is None


def test_a_failed_build_falls_back_with_a_log_line(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture, tmp_path: Path
) -> None:
    monkeypatch.setenv("CC", "/bin/false")
    with caplog.at_level(logging.WARNING, logger="actorllm.kernels.native"):
        assert native.library("paged_decode") is None
    assert "building paged_decode" in caplog.text and "torch path" in caplog.text
    assert not list((tmp_path / "native").glob("*.so"))
