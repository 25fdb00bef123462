"""Where a reasoning model's answer starts, from token ids alone (``--reasoning-parser``):
structured outputs constrain the answer only, as in vLLM.

Two kinds of markers:

* :class:`TokenMarkers`: the block is opened and closed by fixed token sequences
  (``<think>`` / ``</think>``: DeepSeek-R1, Qwen3). The prompt may leave a block open (the
  template opened it), end with a closed one (thinking switched off), or neither; then
  the request's ``thinking`` (its parser's ``thinking_of`` its chat_template_kwargs, as
  vLLM's ``wait_for_reasoning``) says: on, the output starts inside the reasoning; off,
  it is the answer; None (the model opens the block itself, Mistral's ``[THINK]``), a
  single-token opener may still be chosen by the model at the first position.
* :class:`TextMarkers`: plain-text markers the tokenizer splits and merges with their
  neighbours in many ways (Granite 3.2's ``Here is my thought process:`` …
  ``Here is my response:``; Olmo 3's plain-text ``<think>`` … ``</think>``). Where the
  output starts is the ``rule``'s: ``asked``: reasoning is on when the prompt's text holds
  a start marker (Granite's ``thinking`` template writes both markers into the system
  prompt) and does not end with an end marker; ``unless_closed``: reasoning is on unless
  the prompt closed a block after its last start marker (as vLLM's olmo3: the template may
  open the block, or the model does). The answer starts after the output token that
  completes an end marker, found in the detokenized text of the last tokens (with or
  without a space or newline before it, whatever tokens it took).

Both are pure functions of the request's tokens and its thinking (kept on the request,
``reasoning_ended``), so a preempted request, or one rebuilt after a crash by replaying
its outputs, finds the same boundary.
"""

from __future__ import annotations

from typing import Any, Literal, Protocol

# open: the output starts inside the reasoning; may_open: its first token may open it
# (``opener``); closed: the output is the answer from its first token.
PromptState = Literal["open", "may_open", "closed"]
TextRule = Literal["asked", "unless_closed"]


class ReasoningGate(Protocol):
    # The thinking of a request that does not say (its parser's thinking_of no
    # chat_template_kwargs: a completion, a request without reasoning_ended).
    thinking: bool | None

    @property
    def opener(self) -> int | None:
        """A single token that opens reasoning at the output's first position, if any."""
        ...

    @property
    def window(self) -> int:
        """How many of the last output tokens :meth:`ends` needs."""
        ...

    def prompt_state(self, prompt: list[int], thinking: bool | None) -> PromptState:
        """Where the output of ``prompt`` starts, for a request that ``thinking`` (False:
        the output is the answer; None: the markers in the prompt decide)."""
        ...

    def ends(self, tail: list[int]) -> bool:
        """Whether the reasoning ends with the last token of ``tail`` (the tokens since the
        reasoning started, at least the last ``window`` of them)."""
        ...


class TokenMarkers:
    def __init__(self, start: list[int], end: list[int], thinking: bool | None = None) -> None:
        self.start, self.end = start, end
        self.thinking = thinking

    @property
    def opener(self) -> int | None:
        return self.start[0] if len(self.start) == 1 else None

    @property
    def window(self) -> int:
        return len(self.end)

    def prompt_state(self, prompt: list[int], thinking: bool | None) -> PromptState:
        if thinking is False:
            return "closed"
        last_start = _rfind(prompt, self.start)
        if last_start >= 0 and last_start > _rfind(prompt, self.end):
            return "open"
        if _closed_at_end(prompt, self.end):
            # (The template closed the block itself, Qwen3's enable_thinking false: the
            # answer starts at once, as vLLM's is_reasoning_end finds.)
            return "closed"
        if thinking:
            return "open"
        return "may_open" if self.opener is not None else "closed"

    def ends(self, tail: list[int]) -> bool:
        return tail[-len(self.end) :] == self.end


class TextMarkers:
    def __init__(
        self,
        tokenizer: Any,
        starts: tuple[str, ...],
        ends: tuple[str, ...],
        rule: TextRule = "asked",
        thinking: bool | None = None,
    ) -> None:
        self.tokenizer = tokenizer
        self.thinking = thinking
        self.starts, self.end_texts, self.rule = starts, ends, rule
        # Every token decodes to at least one character (a byte, for a byte-level piece of
        # a character): an end marker and the token before it fit in this many.
        self._window = max(len(e) for e in ends) + 2
        self._last_chars = frozenset(e[-1] for e in ends)
        self._may_complete: dict[int, bool] = {}  # {token id: its text has a last char}

    @property
    def opener(self) -> int | None:
        return None

    @property
    def window(self) -> int:
        return self._window

    def prompt_state(self, prompt: list[int], thinking: bool | None) -> PromptState:
        if thinking is False:
            return "closed"
        text = self.tokenizer.decode(prompt)
        if self.rule == "unless_closed":
            last_start = max(text.rfind(s) for s in self.starts)
            closed = any(text.find(e, last_start + 1) >= 0 for e in self.end_texts)
            return "closed" if closed else "open"
        if not any(s in text for s in self.starts):
            return "closed"  # reasoning not asked for (Granite: thinking off)
        if text.rstrip().endswith(self.end_texts):
            return "closed"  # the prompt already wrote the end marker
        return "open"

    def ends(self, tail: list[int]) -> bool:
        last = tail[-1]
        may = self._may_complete.get(last)
        if may is None:
            piece = self.tokenizer.decode([last])
            may = self._may_complete[last] = any(c in piece for c in self._last_chars)
        if not may:  # decode the window only when the last token may complete a marker
            return False
        text = self.tokenizer.decode(tail[-self._window :])
        return any(e in text for e in self.end_texts)


def _closed_at_end(prompt: list[int], end: list[int], slack: int = 3) -> bool:
    """Whether the prompt ends with a reasoning block's end marker (and at most ``slack``
    tokens after it, the template's newlines)."""
    last_end = _rfind(prompt, end)
    return last_end >= 0 and last_end + len(end) >= len(prompt) - slack


def _rfind(seq: list[int], sub: list[int]) -> int:
    n = len(sub)
    for i in range(len(seq) - n, -1, -1):
        if seq[i : i + n] == sub:
            return i
    return -1
