"""Stream a checkpoint's tensors by name from its weight files (models/checkpoint_files.py),
whatever their kind: safetensors through ``safe_open`` (memory-mapped, one tensor at a
time; a tensor-parallel rank can take a lazy slice and read only its part), PyTorch pickles
through models/pt_weights.py (a whole file at a time, one file held at once).

    for name, tensor in iter_checkpoint(weight_files(path)):
        ...
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import torch
from safetensors import safe_open
from tqdm.auto import tqdm

from actorllm.models.checkpoint_files import is_pickle
from actorllm.models.pt_weights import iter_pt, load_pt

# Show a progress bar from this many tensors on (or with more than one shard).
_PROGRESS_MIN_TENSORS = 256


def iter_checkpoint(
    files: list[Path], progress: bool | None = None, lazy: bool = False
) -> Iterator[tuple[str, Any]]:
    """Yield (name, CPU tensor) for every tensor, one at a time. ``lazy``: yield
    safetensors slices instead (``get_slice``; valid until the next item), so a
    tensor-parallel rank reads only its part; a pickle has no such slices, so each rank
    loads every shard whole (one at a time) and keeps its part."""
    if any(is_pickle(f) for f in files):
        show = len(files) > 1 if progress is None else progress
        bar = tqdm(files, desc="Loading pt checkpoint shards", unit="file", disable=not show)
        for f in bar:
            yield from iter_pt([f])
        return
    keys: list[tuple[Path, str]] = []
    for f in files:
        with safe_open(str(f), framework="pt", device="cpu") as h:
            keys.extend((f, k) for k in h.keys())  # noqa: SIM118 (safe_open is not a dict)
    show = len(keys) >= _PROGRESS_MIN_TENSORS or len(files) > 1 if progress is None else progress
    with tqdm(total=len(keys), desc="Loading weights", unit="tensor", disable=not show) as bar:
        for f in files:
            with safe_open(str(f), framework="pt", device="cpu") as h:
                for k in h.keys():  # noqa: SIM118
                    yield k, h.get_slice(k) if lazy else h.get_tensor(k)
                    bar.update(1)


def tensor_names(files: list[Path]) -> Iterator[str]:
    """The names of the tensors in ``files`` (safetensors: headers only; a pickle is
    loaded, memory-mapped where it can be)."""
    for f in files:
        if is_pickle(f):
            yield from load_pt(f)
        else:
            with safe_open(str(f), framework="pt") as handle:
                yield from handle.keys()


def select_tensors(
    files: list[Path], want: Callable[[str], bool]
) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, CPU tensor) of the tensors whose names ``want`` accepts (safetensors: only
    those are read); each owns its memory, so the caller may keep it."""
    for f in files:
        if is_pickle(f):  # copied off the file's mapping
            yield from ((n, t.clone()) for n, t in iter_pt([f]) if want(n))
            continue
        with safe_open(str(f), framework="pt") as st:
            for name in st.keys():  # noqa: SIM118 (safe_open is not a mapping)
                if want(name):
                    yield name, st.get_tensor(name)
