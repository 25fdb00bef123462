"""One row of :mod:`foreign_table`: a vLLM flag (and engine keyword) with no setting here,
and what actorllm does with it."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal


@dataclass(frozen=True)
class Foreign:
    flags: tuple[str, ...]
    verdict: Literal["ignore", "refuse"]
    reason: str
    nargs: int | str | None = None  # argparse's: None one value, 0 a switch, "+" several
    same: tuple[str, ...] = ()  # values that ask for what actorllm does anyway

    @property
    def switch(self) -> bool:
        return self.nargs == 0

    def asks_nothing(self, value: Any) -> bool:
        """The value asks for what actorllm does anyway (vLLM's default, or off)."""
        if value is None or value is False or value == {} or value == []:
            return True
        if str(value) in self.same:
            return True
        if isinstance(value, int | float) and not isinstance(value, bool):
            return any(_number(s) == value for s in self.same)
        return False


def _number(text: str) -> float | None:
    try:
        return float(text)
    except ValueError:
        return None


def ignored(*flags: str, why: str, value: bool = True, nargs: str | None = None) -> Foreign:
    """A flag with no meaning here; ``value=False``: a switch."""
    return Foreign(flags, "ignore", why, nargs=nargs if value else 0)


def refused(
    *flags: str,
    why: str,
    value: bool = True,
    same: tuple[str, ...] = (),
    nargs: str | None = None,
) -> Foreign:
    """A flag that asks for a missing feature; ``value=False``: a switch."""
    return Foreign(flags, "refuse", why, nargs=nargs if value else 0, same=same)
