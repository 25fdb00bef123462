"""vLLM's CLI subcommands that actorllm has not built: each is a command here that stops
with a message naming it and why (exit status 2), never argparse's bare "invalid choice".
"""

from __future__ import annotations

import sys

# {vLLM subcommand: why it is not built}
NOT_BUILT: dict[str, str] = {
    "preload": "weight-cache daemons sharing GPU weights over CUDA IPC are not built; "
    "`actorllm serve` loads its weights itself",
    "snapshot": "engine snapshots (create / inspect / restore) are not built",
    "download-kernels": "there are no prebuilt kernels to fetch: the native CPU kernels "
    "build on first use and the Triton ones compile at run time",
}


def requested(argv: list[str]) -> str | None:
    """The not-built subcommand ``argv`` names (its first word that is not an option of
    the ``actorllm`` command itself), or None: it is refused before its own arguments are
    parsed, whatever they are."""
    words = iter(argv)
    for word in words:
        if word == "--log-level":
            next(words, None)  # its value
        elif not word.startswith("-"):
            return word if word in NOT_BUILT else None
    return None


def refuse(name: str) -> int:
    print(f"actorllm {name}: not built: {NOT_BUILT[name]}.", file=sys.stderr)
    return 2
