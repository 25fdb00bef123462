"""Every flag of vLLM 0.32's ``serve`` and every keyword of its ``EngineArgs`` is known here:
an option of ours, or a row of the table of vLLM's other flags (ignored with a warning, or
refused by name). A newer vLLM's list in ``data/`` shows its new flags as failures.

``data/vllm_0_32_serve_flags.txt``: the long option strings of ``vllm serve --help=all``
(vLLM 0.32). ``data/vllm_0_32_engine_args.txt``: the public fields of its ``EngineArgs``.
"""

from __future__ import annotations

import argparse
import functools
import warnings
from pathlib import Path

import pytest

from actorllm import EngineArgs
from actorllm.compat.vllm import foreign_flags
from actorllm.compat.vllm.foreign_flags import FOREIGN, Foreign, ForeignFlagError
from actorllm.engine.config.engine_config import EngineConfigError
from actorllm.entrypoints import cli

DATA = Path(__file__).parent / "data"


def _names(file: str) -> list[str]:
    return [line.strip() for line in (DATA / file).read_text().splitlines() if line.strip()]


@functools.cache
def _serve_parser() -> argparse.ArgumentParser:
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    serve: argparse.ArgumentParser = sub.choices["serve"]
    return serve


@functools.cache
def _serve_options() -> frozenset[str]:
    """The option strings of ``actorllm serve`` that are settings of ours (not the table's)."""
    return frozenset(
        option
        for action in _serve_parser()._actions
        if not hasattr(action, "foreign")
        for option in action.option_strings
    )


def test_every_vllm_serve_flag_is_an_option_of_ours_or_in_the_table() -> None:
    ours = _serve_options()
    table = {flag for entry in FOREIGN for flag in entry.flags}
    unknown = [f for f in _names("vllm_0_32_serve_flags.txt") if f not in ours | table]
    assert unknown == [], f"vLLM flags neither honoured nor in foreign_table.py: {unknown}"


@pytest.mark.parametrize("name", _names("vllm_0_32_engine_args.txt"))
def test_every_vllm_engine_args_keyword_is_classified(name: str) -> None:
    # None asks for nothing: a field's default, a foreign row's quiet acceptance.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        EngineArgs(**{name: None})


def test_every_row_says_why() -> None:
    for entry in FOREIGN:
        assert entry.reason and entry.flags, entry
        assert all(f.startswith("-") for f in entry.flags), entry


def _rows() -> list[tuple[str, Foreign]]:
    return [(entry.flags[0], entry) for entry in FOREIGN]


@pytest.mark.parametrize(("flag", "entry"), _rows(), ids=[flag for flag, _ in _rows()])
def test_each_row_warns_or_refuses_naming_it_as_a_flag_and_as_a_keyword(
    flag: str, entry: Foreign
) -> None:
    value = [] if entry.switch else ["7", "8"] if entry.nargs == "+" else ["7"]
    if flag not in _serve_options():  # serve's own option of that name wins (--log-level)
        args = _serve_parser().parse_args([flag, *value])
        if entry.verdict == "refuse":
            with pytest.raises(ForeignFlagError, match=flag):
                foreign_flags.notes(args)
        else:
            assert [flag in note for note in foreign_flags.notes(args)] == [True]
    keyword = flag[2:].replace("-", "_")
    given = True if entry.switch else 7
    if entry.verdict == "refuse":
        with pytest.raises(EngineConfigError, match=keyword):
            EngineArgs(**{keyword: given})
    else:
        with pytest.warns(UserWarning, match=keyword):
            EngineArgs(**{keyword: given})
