"""Parsing gpt-oss output text into harmony messages, whole and cut anywhere."""

from __future__ import annotations

from actorllm.core.harmony import HarmonyMessage, parse_output

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
