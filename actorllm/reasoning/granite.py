"""IBM Granite 3.2 reasoning (``thinking: true`` in the chat template kwargs): plain-text
markers, ``Here is my thought process:`` … ``Here is my response:`` (or ``Here's``)."""

from __future__ import annotations

import re

from actorllm.reasoning.base import ReasoningParser, Split

_THOUGHT = re.compile(r"\s*Here(?:'s| is) my thought process:")
_RESPONSE = re.compile(r"Here(?:'s| is) my response:")


class GraniteReasoningParser(ReasoningParser):
    start_texts = ("Here is my thought process:", "Here's my thought process:")
    end_texts = ("Here is my response:", "Here's my response:")
    markers = start_texts + end_texts

    def split(self, text: str, final: bool) -> Split:
        m = _THOUGHT.match(text)
        if m is None:
            if not final and any(mk.startswith(text.lstrip()) for mk in self.markers[:2]):
                return Split(reasoning=None, content="", reasoning_done=False)
            return Split(reasoning=None, content=text, reasoning_done=True)
        body = text[m.end() :]
        r = _RESPONSE.search(body)
        if r is None:
            return Split(reasoning=body, content="", reasoning_done=False)
        return Split(reasoning=body[: r.start()], content=body[r.end() :], reasoning_done=True)
