"""PyTorch weight files are read with torch.load(weights_only=True) only: plain state dicts
load (non-tensor entries skipped), anything that needs code to unpickle is refused by file."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import torch

from actorllm.models.load_errors import UnsafePickleError, WeightLoadError
from actorllm.models.pt_weights import iter_pt, load_pt


class _Payload:
    """A class instance: full unpickling would import and build it."""


def test_a_state_dict_loads_and_skips_what_is_not_a_tensor(tmp_path: Path) -> None:
    f = tmp_path / "model.pt"
    torch.save({"w": torch.arange(6.0).reshape(2, 3), "step": 3, "meta": {"a": "b"}}, f)
    state = load_pt(f)
    assert list(state) == ["w"]
    torch.testing.assert_close(state["w"], torch.arange(6.0).reshape(2, 3))


def test_a_legacy_non_zip_file_loads_too(tmp_path: Path) -> None:
    f = tmp_path / "old.bin"
    torch.save({"w": torch.ones(2)}, f, _use_new_zipfile_serialization=False)
    assert torch.equal(load_pt(f)["w"], torch.ones(2))


def test_iter_pt_streams_every_file_in_order(tmp_path: Path) -> None:
    torch.save({"a": torch.zeros(1), "b": torch.ones(1)}, tmp_path / "1.bin")
    torch.save({"c": torch.full((1,), 2.0)}, tmp_path / "2.bin")
    names = [n for n, _ in iter_pt([tmp_path / "1.bin", tmp_path / "2.bin"])]
    assert names == ["a", "b", "c"]


def test_a_payload_needing_full_unpickling_is_refused_by_file(tmp_path: Path) -> None:
    f = tmp_path / "pytorch_model.bin"
    torch.save({"w": torch.ones(1), "x": _Payload()}, f)
    refused = rf"{re.escape(str(f))}: torch\.load\(weights_only=True\) cannot read it \(.*_Payload"
    with pytest.raises(UnsafePickleError, match=refused):
        load_pt(f)


def test_not_a_state_dict_and_corrupt_files_are_named(tmp_path: Path) -> None:
    f = tmp_path / "list.pt"
    torch.save([torch.ones(1)], f)
    with pytest.raises(WeightLoadError, match=r"list\.pt: holds a list"):
        load_pt(f)
    bad = tmp_path / "bad.bin"
    bad.write_bytes(b"not a pickle")
    with pytest.raises(WeightLoadError, match=r"bad\.bin"):
        load_pt(bad)
