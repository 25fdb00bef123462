"""Pythonic tool calls (Llama 3.2 / Llama 4 templates): a Python list of calls with
keyword arguments, optionally inside ``<|python_start|>`` / ``<|python_end|>``::

    [get_weather(city="Paris", days=3), get_time()]

Arguments are Python literals (strings, numbers, True/False/None, lists, dicts), turned
into JSON. While streaming, a call's name is sent as soon as ``name(`` is seen and its
arguments when its closing parenthesis arrives.
"""

from __future__ import annotations

import ast
import json
import re

from actorllm.entrypoints.openai.tool_parsers.base import Parsed, PartialCall, ToolParser

START, END = "<|python_start|>", "<|python_end|>"
_NAME = re.compile(r"\s*([A-Za-z_][\w.]*)\s*\(")


class PythonicToolParser(ToolParser):
    markers = (START, "[")

    def parse(self, text: str, final: bool) -> Parsed:
        body = text.strip()
        if body.startswith(START):
            body = body[len(START) :]
        body = body.removesuffix(END).strip()
        if not body.startswith("["):
            if not final and START.startswith(body):
                return Parsed(content="")
            return Parsed(content=text)
        if final:
            calls = _parse_list(body)
            return Parsed(content="", calls=calls) if calls else Parsed(content=text)
        return Parsed(content="", calls=_partial(body))


def _parse_list(body: str) -> list[PartialCall] | None:
    try:
        tree = ast.parse(body, mode="eval").body
    except SyntaxError:
        return None
    if not isinstance(tree, ast.List) or not tree.elts:
        return None
    calls = []
    for elt in tree.elts:
        call = _call(elt)
        if call is None:
            return None
        calls.append(call)
    return calls


def _call(node: ast.expr) -> PartialCall | None:
    if not isinstance(node, ast.Call) or node.args:
        return None
    name = ast.unparse(node.func)
    try:
        args = {kw.arg: ast.literal_eval(kw.value) for kw in node.keywords if kw.arg}
    except ValueError:
        return None
    return PartialCall(name=name, arguments=json.dumps(args, ensure_ascii=False), complete=True)


def _partial(body: str) -> list[PartialCall]:
    """Complete calls, then the call being written (its name once ``name(`` is there)."""
    calls: list[PartialCall] = []
    pos = 1
    while True:
        m = _NAME.match(body, pos)
        if m is None:
            return calls
        end = _close_paren(body, m.end())
        if end is None:
            calls.append(PartialCall(name=m.group(1), arguments=""))
            return calls
        call = _call(_expr(body[pos:end]))
        if call is None:
            return calls
        calls.append(call)
        pos = end
        while pos < len(body) and body[pos] in " ,\n":
            pos += 1


def _expr(text: str) -> ast.expr:
    try:
        return ast.parse(text.strip(), mode="eval").body
    except SyntaxError:
        return ast.Constant(None)


def _close_paren(text: str, pos: int) -> int | None:
    """Index after the ``)`` matching the ``(`` before ``pos`` (strings skipped), or None."""
    depth, quote, i = 1, "", pos
    while i < len(text):
        ch = text[i]
        if quote:
            if ch == "\\":
                i += 1
            elif ch == quote:
                quote = ""
        elif ch in "'\"":
            quote = ch
        elif ch in "([{":
            depth += 1
        elif ch in ")]}":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return None
