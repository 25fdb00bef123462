"""Which of vLLM 0.32's public names a script cannot import from ``actorllm`` after renaming
``vllm`` to ``actorllm``: for each user-facing vLLM module (:data:`MODULES`), its public
names (``__all__`` where it has one, else the classes and functions defined in it, not the
ones it imports), each checked under the same ``actorllm`` path.

    benchmarks/peers/setup_vllm_cpu.sh                 # the peer venv, once
    .venv/bin/python benchmarks/peers/vllm_import_paths.py [--json out.json]

The listing runs in the peer's interpreter (importing vLLM takes ~30 s); the check runs
here. A name missing here is not always a gap: the report says "missing", and
docs/offline.md ("vLLM's import paths") says which names are left out on purpose.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

PEER = Path(os.environ.get("VLLM_CPU_VENV", "/work/venv-vllm-cpu"))

# vLLM's modules that scripts import (its docs' examples, RLHF and plugin scripts).
MODULES = (
    "vllm",
    "vllm.config",
    "vllm.entrypoints.llm",
    "vllm.outputs",
    "vllm.inputs",
    "vllm.sampling_params",
    "vllm.pooling_params",
    "vllm.logprobs",
    "vllm.lora.request",
    "vllm.engine.arg_utils",
    "vllm.engine.llm_engine",
    "vllm.engine.async_llm_engine",
    "vllm.v1.engine.async_llm",
    "vllm.v1.engine.exceptions",
    "vllm.v1.metrics.reader",
    "vllm.v1.sample.logits_processor",
    "vllm.v1.watermarking",
    "vllm.config.watermarking",
    "vllm.tokenizers",
    "vllm.transformers_utils.tokenizer",
    "vllm.exceptions",
    "vllm.distributed.weight_transfer",
    "vllm.utils.argparse_utils",
)

# Runs in the peer: {module: [public names]} or {module: None} when vLLM has no such module.
_LIST = r"""
import importlib, inspect, json, sys
out = {}
for name in sys.argv[1:]:
    try:
        mod = importlib.import_module(name)
    except ImportError:
        out[name] = None
        continue
    names = getattr(mod, "__all__", None)
    if names is None:
        names = [
            n for n, v in vars(mod).items()
            if not n.startswith("_") and (inspect.isclass(v) or inspect.isfunction(v))
            and getattr(v, "__module__", None) == name
        ]
    out[name] = sorted(names)
print("JSON:" + json.dumps(out))
"""


def peer_names() -> dict[str, list[str] | None]:
    """The public names of :data:`MODULES` in the peer's vLLM."""
    done = subprocess.run(
        [str(PEER / "bin" / "python"), "-c", _LIST, *MODULES],
        capture_output=True,
        text=True,
        timeout=600,
        check=True,
    )
    line = next(x for x in done.stdout.splitlines() if x.startswith("JSON:"))
    return json.loads(line[len("JSON:") :])


def ours(module: str) -> str:
    return "actorllm" + module[len("vllm") :]


def missing(listing: dict[str, list[str] | None]) -> dict[str, list[str] | str]:
    """{actorllm module: the names it lacks, or "module" when it cannot be imported}."""
    out: dict[str, list[str] | str] = {}
    for module, names in listing.items():
        if names is None:
            continue  # not a vLLM 0.32 module
        try:
            mod = importlib.import_module(ours(module))
        except ImportError:
            out[ours(module)] = "module"
            continue
        lacking = [n for n in names if not hasattr(mod, n)]
        if lacking:
            out[ours(module)] = lacking
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--json", type=Path, help="also write the result here")
    args = parser.parse_args()
    listing = peer_names()
    result = missing(listing)
    for module, names in listing.items():
        if names is None:
            print(f"{module}: not in vLLM 0.32")
    for module, lacking in result.items():
        if lacking == "module":
            print(f"{module}: MODULE MISSING ({len(listing['vllm' + module[8:]] or [])} names)")
        else:
            print(f"{module}: missing {', '.join(lacking)}")
    if args.json:
        args.json.write_text(json.dumps({"peer": listing, "missing": result}, indent=1))
    sys.exit(0)


if __name__ == "__main__":
    main()
