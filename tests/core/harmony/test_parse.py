"""Parsing gpt-oss output text into harmony messages: whole, cut anywhere, and fed piece by
piece to one parser whose events add up to what the whole text parses to."""

from __future__ import annotations

import dataclasses
import random

import pytest

from actorllm.core.harmony import (
    MESSAGE,
    HarmonyMessage,
    HarmonyParser,
    Opened,
    parse_output,
)
from tests.helpers.harmony import long_answer

THINK = "<|channel|>analysis<|message|>User asks 2+2. Simple.<|end|>"
ANSWER = "<|start|>assistant<|channel|>final<|message|>2 + 2 = 4."
CALL = (
    "<|start|>assistant<|channel|>commentary to=functions.get_weather <|constrain|>json"
    '<|message|>{"location":"SF"}'
)


def test_reasoning_then_answer() -> None:
    out = parse_output(THINK + ANSWER, final=True)
    assert out.messages == [
        HarmonyMessage("assistant", "User asks 2+2. Simple.", channel="analysis"),
        HarmonyMessage("assistant", "2 + 2 = 4.", channel="final"),
    ]
    assert out.current is None and not out.pending


def test_a_call_with_recipient_and_content_type() -> None:
    (_, call) = parse_output(THINK + CALL, final=True).messages
    assert (call.recipient, call.channel, call.content_type) == (
        "functions.get_weather", "commentary", "<|constrain|>json",
    )  # fmt: skip
    # The recipient may sit in the role part of the header, before the channel.
    other = parse_output("<|start|>assistant to=functions.f<|channel|>commentary json<|message|>{}",
                         role=None, final=True).messages  # fmt: skip
    assert (other[0].recipient, other[0].content_type) == ("functions.f", "json")


def test_cut_anywhere_the_parts_only_grow() -> None:
    text = THINK + ANSWER
    seen_reasoning, seen_answer = "", ""
    for i in range(len(text) + 1):
        out = parse_output(text[:i])
        msgs = out.all()
        reasoning = "".join(m.content for m in msgs if m.channel == "analysis")
        answer = "".join(m.content for m in msgs if m.channel == "final")
        assert reasoning.startswith(seen_reasoning) and answer.startswith(seen_answer)
        seen_reasoning, seen_answer = reasoning, answer
    assert (seen_reasoning, seen_answer) == ("User asks 2+2. Simple.", "2 + 2 = 4.")


def test_unfinished_header_is_pending_and_text_outside_messages_is_dropped() -> None:
    out = parse_output(THINK + "<|start|>assistant<|channel|>fin")
    assert out.pending and out.current is None and len(out.messages) == 1
    assert parse_output("stray<|start|>user<|message|>hi<|end|>", role=None).messages == [
        HarmonyMessage("user", "hi")
    ]


def test_a_header_cut_off_by_a_stop_token_is_content() -> None:
    # The model forgot <|message|> (vLLM repairs it): what follows the channel is the content.
    (msg,) = parse_output("<|channel|>final hello  there\nagain<|return|>").messages
    assert (msg.channel, msg.content) == ("final", "hello  there\nagain")
    # Final: an unterminated message counts as finished.
    (msg,) = parse_output("<|channel|>final<|message|>partial", final=True).messages
    assert msg.content == "partial"


def _pieces(text: str, how: str) -> list[str]:
    """``text`` cut into a stream's deltas: one character each (so inside every token and
    header), or awkward sizes around a token's length."""
    if how == "chars":
        return list(text)
    rng, out, i = random.Random(7), [], 0
    while i < len(text):
        n = rng.choice([1, 2, 3, 5, 8, 11, 13, 40])
        out.append(text[i : i + n])
        i += n
    return out


@pytest.mark.parametrize("how", ["chars", "chunks"])
def test_fed_in_pieces_the_events_add_up_to_the_whole_parse(how: str) -> None:
    text = long_answer(3)
    parser, seen = HarmonyParser(), []  # seen: the messages as the events built them
    pieces = _pieces(text, how)
    fed = ""
    for n, piece in enumerate(pieces, 1):
        fed += piece
        final = n == len(pieces)
        for event in parser.feed(piece, final=final):
            if isinstance(event, Opened):
                assert event.index == len(seen) and event.message.content == ""
                seen.append(event.message)
            else:
                m = seen[event.index]
                seen[event.index] = dataclasses.replace(m, content=m.content + event.text)
        # What the events told so far is what parsing this prefix whole gives.
        whole = parse_output(fed, final=final)
        assert seen == whole.all()
        assert parser.output() == whole
    assert seen == parser.messages == parse_output(text, final=True).messages
    assert len(seen) == 3 * 8 + 1 and not parser.output().pending


def test_the_parser_reads_each_piece_once() -> None:
    """Bounded work: a piece is scanned once, beside at most the held start of a token
    before it, and the cursor (what is read for good) only moves on."""
    text = long_answer(12)
    held_at_most = len(MESSAGE) - 1  # the longest token that moves the parser, less one
    parser, cursor = HarmonyParser(), 0
    pieces = _pieces(text, "chars") + _pieces(text, "chunks")
    for piece in pieces:
        before = parser.statistics()
        parser.feed(piece)
        after = parser.statistics()
        assert after.scanned - before.scanned <= len(piece) + held_at_most
        assert after.held <= held_at_most and after.fed - after.held >= cursor
        cursor = after.fed - after.held
    assert after.fed == 2 * len(text)
    assert after.scanned <= after.fed + held_at_most * len(pieces)
