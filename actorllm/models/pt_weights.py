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
import re
import zipfile
from collections.abc import Iterator
from pathlib import Path

import torch

from actorllm.models.load_errors import UnsafePickleError, WeightLoadError

log = logging.getLogger(__name__)
# torch's message wraps the reason ("Unsupported global: GLOBAL os.system was not an allowed
# global by default") in advice to retry with weights_only=False, which is never taken here.
_UNPICKLER_ERROR = re.compile(r"WeightsUnpickler error:\s*(.+?)(?:\. |\n|$)", re.S)


def load_pt(f: Path, *, mmap: bool = True) -> dict[str, torch.Tensor]:
    """{name: CPU tensor} of one state-dict file (``mmap``: backed by the file where its
    format allows). Entries that are not tensors (a saved step count, a nested dict of
    metadata) are skipped: they are not weights."""
    mmap = mmap and zipfile.is_zipfile(f)  # the legacy format cannot be mapped
    try:
        state = torch.load(f, map_location="cpu", weights_only=True, mmap=mmap)
    except pickle.UnpicklingError as exc:
        raise UnsafePickleError(
            f"{f}: torch.load(weights_only=True) cannot read it ({_reason(exc)}); only "
            "that restricted unpickler is used (tensors and plain values), since reading the "
            "file fully could run code from it. Re-save it as a plain state dict of tensors, "
            "or as safetensors"
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


def _reason(exc: BaseException) -> str:
    """The restricted unpickler's own complaint, without torch's advice to load unsafely."""
    m = _UNPICKLER_ERROR.search(str(exc))
    return m.group(1).strip() if m else type(exc).__name__
