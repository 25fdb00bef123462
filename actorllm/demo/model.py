"""The demo model: a small Llama trained on the demo tokenizer's corpus, shipped with the
package, so ``actorllm serve`` with no model answers with text that reads like English prose
or Python (it is not a useful model: 3 layers, 3M parameters, 15 minutes of one CPU core).

``actorllm/demo/weights/`` holds what ``scripts/train_demo_model.py`` wrote (config.json,
generation_config.json, model.safetensors in bfloat16); the training command is in that
script's docstring. ``demo_model_path()`` returns ``$ACTORLLM_CACHE/demo-model-v3``
(default cache ``~/.cache/actorllm``): the shipped files plus the demo tokenizer's, in one
directory that transformers' ``AutoModelForCausalLM`` / ``AutoTokenizer`` load too.

The directory is assembled in a temporary directory beside the target and renamed into
place, so a reader never sees a half-written model and concurrent callers (threads or
processes) are safe: the first rename wins and the others discard their copy.

    >>> path = demo_model_path()  # doctest: +SKIP
    >>> sorted(p.name for p in path.iterdir())  # doctest: +SKIP
    ['config.json', 'generation_config.json', 'model.safetensors', 'tokenizer.json', ...]
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from actorllm.demo.tokenizer import demo_tokenizer_path

# Bump when the shipped files change, so stale caches are not reused (v3: trained weights).
DEMO_MODEL_NAME = "demo-model-v3"
_SHIPPED = Path(__file__).resolve().parent / "weights"
_FILES = ("config.json", "generation_config.json", "model.safetensors")


def cache_dir() -> Path:
    """``$ACTORLLM_CACHE``, else ``~/.cache/actorllm``."""
    env = os.environ.get("ACTORLLM_CACHE")
    return Path(env).expanduser() if env else Path.home() / ".cache" / "actorllm"


def shipped_model_path() -> Path:
    """The package's demo model files (weights and configs, no tokenizer).

    Raises FileNotFoundError if the package was installed without its data files.
    """
    missing = [f for f in _FILES if not (_SHIPPED / f).is_file()]
    if missing:
        raise FileNotFoundError(f"demo model files {missing} missing from {_SHIPPED}")
    return _SHIPPED


def demo_model_path() -> Path:
    """Directory of the demo model with its tokenizer, assembled on first use.

    Safe to call concurrently. Raises ``OSError`` if the cache directory is not writable.
    """
    target = cache_dir() / DEMO_MODEL_NAME
    if (target / "config.json").is_file():
        return target
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=f".{DEMO_MODEL_NAME}-", dir=target.parent))
    try:
        _assemble(tmp)
        # mkdtemp makes 0700: the cache may be shared, so open it up like a normal download.
        tmp.chmod(0o755)
        for f in tmp.iterdir():
            f.chmod(0o644)
        try:
            os.rename(tmp, target)
        except OSError:
            if not (target / "config.json").is_file():
                raise  # not a lost race: a real error
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    return target


def _assemble(directory: Path) -> None:
    shipped = shipped_model_path()
    for name in _FILES:
        shutil.copyfile(shipped / name, directory / name)
    for f in demo_tokenizer_path().iterdir():
        if f.is_file() and f.suffix in (".json", ".jinja", ".txt"):
            shutil.copyfile(f, directory / f.name)
