"""vLLM's flags with no setting here (the table :data:`FOREIGN`, in :mod:`foreign_table`) on
an argparse parser: each given one is recorded as parsed, and :func:`notes` turns the
record into warnings (ignored flags) or an error (the first refused one that asks for
something)."""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from typing import Any

from actorllm.compat.vllm.foreign_entry import Foreign
from actorllm.compat.vllm.foreign_table import FOREIGN

__all__ = ["FOREIGN", "NOTES_DEST", "Foreign", "ForeignFlagError", "add_foreign_flags", "notes"]

# Where parse results go: [(verdict, flag, value, reason)], read by notes().
NOTES_DEST = "_vllm_compat_notes"


class _Record(argparse.Action):
    """Stores (verdict, flag, value, reason) for :func:`notes`; decides nothing itself."""

    def __init__(self, option_strings: Sequence[str], dest: str, foreign: Foreign, **kw: Any):
        self.foreign = foreign
        super().__init__(option_strings, dest, nargs=foreign.nargs, **kw)

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        notes = list(getattr(namespace, NOTES_DEST, []))
        if isinstance(values, list):
            value: str | None = " ".join(values) if values else None
        else:
            value = values if isinstance(values, str) else None
        if option_string is not None and option_string.startswith("--no-"):
            # --no-x asks for x off: what actorllm does (it has no x at all).
            return
        notes.append((self.foreign.verdict, option_string, value, self.foreign))
        setattr(namespace, NOTES_DEST, notes)


def add_foreign_flags(parser: argparse.ArgumentParser, extra: Sequence[Foreign] = ()) -> None:
    """Add vLLM's other flags (those no setting of ours already defines) in one group;
    ``extra``: a command's own (``run-batch``'s metrics server flags)."""
    taken = set(parser._option_string_actions)
    group = parser.add_argument_group(
        "vLLM compatibility", "vLLM flags with no setting here: see each one's note."
    )
    for foreign in [*extra, *FOREIGN]:
        flags = [f for f in foreign.flags if f not in taken]
        if not flags:
            continue
        if foreign.switch:  # vLLM's switches also come as --no-x (BooleanOptionalAction)
            flags += [f"--no-{f[2:]}" for f in flags if f.startswith("--")]
            flags = [f for f in flags if f not in taken]
        verb = "ignored with a warning" if foreign.verdict == "ignore" else "refused"
        note = f"{verb}: {foreign.reason}"
        if foreign.same:
            note += f" (accepted: {', '.join(foreign.same)})"
        group.add_argument(
            *flags,
            action=_Record,
            foreign=foreign,
            dest=NOTES_DEST + "_unused",
            default=argparse.SUPPRESS,
            help=note,
            metavar=None if foreign.switch else "VALUE",
        )


class ForeignFlagError(ValueError):
    """A vLLM flag asked for a feature actorllm does not have."""


def notes(args: argparse.Namespace) -> list[str]:
    """Warnings for the ignored flags the user gave (one per flag). Raises
    :class:`ForeignFlagError` for the first refused one whose value asks for something."""
    warnings: dict[str, str] = {}
    for verdict, flag, value, foreign in getattr(args, NOTES_DEST, []):
        shown = f"{flag} {value}" if value is not None else flag
        if verdict == "refuse":
            if value is not None and value in foreign.same:
                continue
            raise ForeignFlagError(f"{shown}: {foreign.reason}.")
        warnings[flag] = f"{flag} has no effect in actorllm: {foreign.reason}; ignoring it."
    return list(warnings.values())
