"""Small helpers that turn specs into grammar text both backends read."""

from __future__ import annotations

import json


def choice_as_ebnf(choices: list[str]) -> str:
    """``root ::= "a" | "b"``, each choice a JSON-escaped EBNF string literal.

    >>> choice_as_ebnf(['yes', 'say "no"'])
    'root ::= "yes" | "say \\\\"no\\\\""'
    """
    return "root ::= " + " | ".join(json.dumps(c, ensure_ascii=False) for c in choices)


def looks_like_lark(grammar: str) -> bool:
    """Lark rules use ``:``; GBNF/EBNF rules use ``::=`` (vLLM's heuristic, simplified).

    >>> looks_like_lark('start: "a"'), looks_like_lark('root ::= "a"')
    (True, False)
    """
    for line in grammar.splitlines():
        line = line.split("//", 1)[0].split("#", 1)[0].strip()
        if not line:
            continue
        if "::=" in line:
            return False
        if ":" in line:
            return True
    return False
