"""Read PyTorch (pickle) weight files: ``pytorch_model*.bin`` and ``*.pt`` state dicts.

Only ``torch.load(weights_only=True)`` is used: PyTorch's restricted unpickler, which
builds tensors, containers and plain values and nothing else, so a file cannot run code.
A file that needs full unpickling (a pickled module or any other class) is refused as
:class:`UnsafePickleError`, naming the file; it is never retried unrestricted.

Unlike safetensors a pickle has no header to read one tensor from, so a file is loaded
whole. Files saved in PyTorch's zip format (every ``torch.save`` since 1.6) are memory-mapped
by default: their tensors are read from disk as they are copied, not held in RAM. Such a
tensor stays backed by the file, so a reader that keeps one past the load (an adapter, a
head) copies it or passes ``mmap=False``: a file replaced under a mapping would fault.

    >>> state = load_pt(Path("pytorch_model.bin"))  # doctest: +SKIP
    >>> state["model.embed_tokens.weight"].shape  # doctest: +SKIP
    torch.Size([32000, 4096])
"""

from __future__ import annotations

import logging
import pickle
import zipfile
from collections.abc import Iterator
from pathlib import Path

import torch

from actorllm.models.load_errors import UnsafePickleError, WeightLoadError

log = logging.getLogger(__name__)


def load_pt(f: Path, *, mmap: bool = True) -> dict[str, torch.Tensor]:
    """{name: CPU tensor} of one state-dict file (``mmap``: backed by the file where its
    format allows). Entries that are not tensors (a saved step count, a nested dict of
    metadata) are skipped: they are not weights."""
    mmap = mmap and zipfile.is_zipfile(f)  # the legacy format cannot be mapped
    try:
        state = torch.load(f, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        raise UnsafePickleError(
            f"{f}: this PyTorch file needs full unpickling, which can run code from the file; "
            "weights are only read with torch.load(weights_only=True). Re-save it as a plain "
            f"state dict of tensors, or as safetensors ({_first_line(exc)})"
        ) from None
    except Exception as exc:  # a truncated or corrupt file: torch's own errors
        raise WeightLoadError(f"{f}: unreadable PyTorch weight file: {exc}") from None
    if not isinstance(state, dict):
        raise WeightLoadError(f"{f}: holds a {type(state).__name__}, not a state dict of tensors")
    skipped = [str(k) for k, v in state.items() if not isinstance(v, torch.Tensor)]
    if skipped:
        log.warning("%s: skipping entries that are not tensors: %s", f, ", ".join(skipped[:8]))
    return {str(k): v for k, v in state.items() if isinstance(v, torch.Tensor)}


def iter_pt(files: list[Path]) -> Iterator[tuple[str, torch.Tensor]]:
    """(name, CPU tensor) for every tensor of ``files``, one file at a time: each tensor is
    let go as it is yielded, so at most one shard is held (vLLM's pt_weights_iterator)."""
    for f in files:
        state = load_pt(f)
        for name in list(state):
            yield name, state.pop(name)


def _first_line(exc: BaseException) -> str:
    lines = str(exc).strip().splitlines()
    return lines[0] if lines else type(exc).__name__
