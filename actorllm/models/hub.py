"""Where a model named by the user lives: a local directory, or a Hugging Face hub id.

``resolve_model("Qwen/Qwen3-0.6B")`` returns the snapshot directory in the hub cache
(``<cache>/models--Qwen--Qwen3-0.6B/snapshots/<commit>``), downloading what is missing
through ``huggingface_hub.snapshot_download`` unless the hub may not be contacted. A path
that exists is always taken as a local directory, so local checkpoints never touch the hub.

The environment is read at each call, not at import (huggingface_hub reads it once, when
first imported), so a test or an embedding application can set it late:

* cache: ``cache_dir`` argument (``--download-dir``), else ``$HF_HUB_CACHE``, else
  ``$HF_HOME/hub``, else huggingface_hub's default (``~/.cache/huggingface/hub``);
* ``HF_HUB_OFFLINE=1``: only the cache is read, the hub is never contacted.

Only the files actorllm reads are fetched: configs, tokenizer files, chat templates, and
one kind of weight file, the first the repository has of those ``load_format`` reads
(``auto``: safetensors, PyTorch ``*.bin``, ``*.pt``, vLLM's order; ``pt``: the PyTorch
files; ``dummy``: none), so a repository that carries both safetensors and pickles costs
one download of its weights. A trainer's pickled states (``training_args.bin``, ...) are
never fetched.

    >>> resolve_model("/models/tiny")  # doctest: +SKIP
    PosixPath('/models/tiny')
"""

from __future__ import annotations

import os
import re
from fnmatch import fnmatch
from pathlib import Path

from actorllm.models.checkpoint_files import NOT_WEIGHTS, weight_patterns

# What a model directory needs besides weights: configs, tokenizer files, chat templates.
ALLOW_PATTERNS = ["*.json", "*.jinja", "*.txt", "*.model", "*.tiktoken"]
_HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[\w.-]+)?$")
_TRUE = ("1", "on", "yes", "true")


class ModelNotFoundError(FileNotFoundError):
    """The configured model is neither a local directory with a config.json nor a hub id
    that can be found (in the cache, or downloaded when the hub may be contacted).

    Defined here, where it is raised; ``actorllm.engine.config.engine_config`` re-exports it.
    """


def looks_like_hub_id(name: str) -> bool:
    """``org/name`` or ``name``: letters, digits, ``_.-`` (no leading ``/``, ``.`` or ``~``)."""
    return bool(_HUB_ID.match(name)) and ".." not in name


def hub_cache_dir(cache_dir: str | os.PathLike[str] | None = None) -> Path:
    """The hub cache in use, from the argument or the environment (read now)."""
    if cache_dir:
        return Path(cache_dir).expanduser()
    if os.environ.get("HF_HUB_CACHE"):
        return Path(os.environ["HF_HUB_CACHE"]).expanduser()
    if os.environ.get("HF_HOME"):
        return Path(os.environ["HF_HOME"]).expanduser() / "hub"
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


def hub_offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in _TRUE


def resolve_model(
    name: str,
    *,
    revision: str | None = None,
    cache_dir: str | os.PathLike[str] | None = None,
    required_file: str | None = "config.json",
    load_format: str = "auto",
) -> Path:
    """The local directory holding ``name`` (a path, or a hub id at ``revision``).

    ``required_file`` must exist in a local directory (tokenizer directories pass None);
    ``load_format`` (``--load-format``) says which weight files a download fetches.
    Raises :class:`ModelNotFoundError` naming the model and, for hub ids, the cache looked
    in. Blocks while downloading (call it off the event loop).
    """
    local = Path(name).expanduser()
    if local.suffix.lower() == ".gguf":  # one file holds config and weights (models/gguf/)
        if required_file is not None and local.is_file():
            return local
        raise ModelNotFoundError(
            f"model {name!r} is not a GGUF file that exists (GGUF files are read from a "
            "local path; hub downloads of GGUF files are not supported)."
            if required_file is not None
            else f"{name!r} is a GGUF file, not a tokenizer directory."
        )
    if local.exists() or not looks_like_hub_id(name):
        if local.is_dir() and (required_file is None or (local / required_file).is_file()):
            return local
        what = f"a directory with a {required_file}" if required_file else "a directory"
        raise ModelNotFoundError(f"model {name!r} is not {what} (nor a hub id).")
    return _from_hub(name, revision, hub_cache_dir(cache_dir), required_file, load_format)


def fetched_weights(repo_files: list[str], load_format: str = "auto") -> list[str]:
    """The weight pattern to fetch: the first that ``load_format`` reads any of
    ``repo_files`` matches (none: the loader names what is missing)."""
    for pattern in weight_patterns(load_format):
        if any(fnmatch(f, pattern) and Path(f).name not in NOT_WEIGHTS for f in repo_files):
            return [pattern]
    return []


def _from_hub(
    name: str, revision: str | None, cache: Path, required_file: str | None, load_format: str
) -> Path:
    from huggingface_hub import HfApi, snapshot_download

    offline = hub_offline()
    at = f"{name!r} (revision {revision or 'main'})"
    try:
        # Offline the cached snapshot is taken as it is (nothing is fetched), whatever
        # kind of weights it holds.
        weights = (
            weight_patterns(load_format)
            if offline
            else fetched_weights(HfApi().list_repo_files(name, revision=revision), load_format)
        )
        path = Path(
            snapshot_download(
                repo_id=name,
                revision=revision,
                cache_dir=str(cache),
                allow_patterns=ALLOW_PATTERNS + weights,
                ignore_patterns=sorted(NOT_WEIGHTS),
                local_files_only=offline,
            )
        )
    except Exception as exc:  # huggingface_hub's many errors: not cached, no such repo, ...
        how = (
            "HF_HUB_OFFLINE is set, so the hub was not contacted"
            if offline
            else f"downloading failed: {type(exc).__name__}: {exc}"
        )
        raise ModelNotFoundError(
            f"model {at} is not a local directory and is not in the Hugging Face hub cache "
            f"at {cache} ({how})."
        ) from exc
    if required_file is not None and not (path / required_file).is_file():
        raise ModelNotFoundError(f"model {at} in the hub cache at {path} has no {required_file}.")
    return path
