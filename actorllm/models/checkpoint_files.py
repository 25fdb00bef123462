"""Which files of a model directory hold its weights, per ``--load-format`` (vLLM 0.32's
``DefaultModelLoader._prepare_weights``).

Each format tries its kinds of file in order and takes the first kind the directory has:
``auto`` safetensors, then PyTorch ``*.bin``, then ``*.pt``; ``safetensors`` only
safetensors; ``pt`` only the PyTorch files. Within a kind, an index's weight map (when
present) names the shards, so a consolidated file beside them, or stray files, are never
read twice; without one the single conventional file, else every file of that kind but a
trainer's states (``training_args.bin``, optimizer and scheduler states: pickles, never
weights).

    >>> weight_files("/models/opt-125m")  # doctest: +SKIP
    [PosixPath('/models/opt-125m/pytorch_model.bin')]
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import NamedTuple

from actorllm.models.load_errors import MissingCheckpointError


class _Kind(NamedTuple):
    """One kind of weight file: its glob, its sharded index, its single-file name."""

    pattern: str
    index_name: str | None
    single_name: str | None


_SAFETENSORS = _Kind("*.safetensors", "model.safetensors.index.json", "model.safetensors")
_BIN = _Kind("*.bin", "pytorch_model.bin.index.json", "pytorch_model.bin")
_PT = _Kind("*.pt", None, None)
# --load-format -> the kinds it reads, tried in order (the first present wins)
_KINDS = {"auto": (_SAFETENSORS, _BIN, _PT), "safetensors": (_SAFETENSORS,), "pt": (_BIN, _PT)}
# What a trainer saves beside the weights (vLLM's filter_files_not_needed_for_inference).
NOT_WEIGHTS = frozenset(
    {"training_args.bin", "optimizer.bin", "optimizer.pt", "scheduler.pt", "scaler.pt"}
)
PICKLE_SUFFIXES = (".bin", ".pt")


def is_pickle(f: Path) -> bool:
    """A PyTorch (pickle) weight file, read with ``torch.load`` (models/pt_weights.py)."""
    return f.suffix in PICKLE_SUFFIXES


def weight_files(path: str | Path, load_format: str = "auto") -> list[Path]:
    """The checkpoint's weight files for ``load_format`` (auto, safetensors or pt), in
    index order; raises :class:`MissingCheckpointError` naming what was looked for."""
    path = Path(path)
    kinds = _KINDS[load_format]
    for kind in kinds:
        files = _files_of(path, kind)
        if files:
            return files
    wanted = " or ".join(k.pattern for k in kinds)
    raise MissingCheckpointError(f"no {wanted} files in {path} (--load-format {load_format})")


def weight_patterns(load_format: str) -> list[str]:
    """The globs of the weight files ``load_format`` reads, most preferred first (none for
    dummy weights, which read no file)."""
    return [kind.pattern for kind in _KINDS.get(load_format, ())]


def safetensors_files(path: str | Path) -> list[Path]:
    """The checkpoint's safetensors files (see :func:`weight_files`)."""
    return weight_files(path, "safetensors")


def _files_of(path: Path, kind: _Kind) -> list[Path]:
    index = path / kind.index_name if kind.index_name else None
    if index is not None and index.is_file():
        weight_map: dict[str, str] = json.loads(index.read_text())["weight_map"]
        files = [path / f for f in dict.fromkeys(weight_map.values())]
        absent = [str(f.name) for f in files if not f.is_file()]
        if absent:
            raise MissingCheckpointError(f"{index} lists shards that do not exist: {absent}")
        return files
    if kind.single_name is not None and (path / kind.single_name).is_file():
        return [path / kind.single_name]
    return sorted(f for f in path.glob(kind.pattern) if f.name not in NOT_WEIGHTS)
