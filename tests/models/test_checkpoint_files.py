"""Which weight files each --load-format reads (vLLM's order and filters), from file names
alone: nothing here opens a file but an index."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from actorllm.models.checkpoint_files import is_pickle, weight_files
from actorllm.models.load_errors import MissingCheckpointError


def _touch(root: Path, *names: str) -> Path:
    for n in names:
        (root / n).write_bytes(b"")
    return root


def _names(files: list[Path]) -> list[str]:
    return [f.name for f in files]


def test_auto_prefers_safetensors_then_bin_then_pt(tmp_path: Path) -> None:
    _touch(tmp_path, "model.pt", "pytorch_model.bin", "model.safetensors")
    assert _names(weight_files(tmp_path)) == ["model.safetensors"]
    (tmp_path / "model.safetensors").unlink()
    assert _names(weight_files(tmp_path)) == ["pytorch_model.bin"]
    (tmp_path / "pytorch_model.bin").unlink()
    assert _names(weight_files(tmp_path)) == ["model.pt"]


def test_each_format_reads_only_its_kind(tmp_path: Path) -> None:
    _touch(tmp_path, "model.safetensors", "pytorch_model.bin")
    assert _names(weight_files(tmp_path, "safetensors")) == ["model.safetensors"]
    assert _names(weight_files(tmp_path, "pt")) == ["pytorch_model.bin"]
    (tmp_path / "pytorch_model.bin").unlink()
    with pytest.raises(MissingCheckpointError, match=r"no \*\.bin or \*\.pt files.*pt\)"):
        weight_files(tmp_path, "pt")


def test_the_bin_index_names_the_shards(tmp_path: Path) -> None:
    shards = ["pytorch_model-00001-of-00002.bin", "pytorch_model-00002-of-00002.bin"]
    _touch(tmp_path, *shards, "pytorch_model.bin", "training_args.bin", "optimizer.pt")
    index = {"weight_map": {"a.weight": shards[1], "b.weight": shards[0], "c.bias": shards[1]}}
    (tmp_path / "pytorch_model.bin.index.json").write_text(json.dumps(index))
    assert _names(weight_files(tmp_path)) == [shards[1], shards[0]]  # index order, once each
    (tmp_path / shards[0]).unlink()
    with pytest.raises(MissingCheckpointError, match="00001-of-00002"):
        weight_files(tmp_path)


def test_trainer_states_are_never_weights(tmp_path: Path) -> None:
    _touch(tmp_path, "training_args.bin", "optimizer.bin", "scheduler.pt", "scaler.pt")
    with pytest.raises(MissingCheckpointError, match=r"safetensors or .*bin or .*pt"):
        weight_files(tmp_path)
    _touch(tmp_path, "weights-a.bin", "weights-b.bin")
    assert _names(weight_files(tmp_path)) == ["weights-a.bin", "weights-b.bin"]
    assert all(is_pickle(f) for f in weight_files(tmp_path))
