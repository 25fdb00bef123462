"""``openai_gptoss``: harmony's analysis channel is the reasoning; structured outputs start
after the final channel's header."""

from __future__ import annotations

from actorllm.reasoning import ReasoningStreamer, get_reasoning_parser
from actorllm.structured_output.reasoning_gate import TokenMarkers
from tests.helpers.harmony import harmony_tokenizer

OUT = (
    "<|channel|>analysis<|message|>Two plus two.<|end|>"
    "<|start|>assistant<|channel|>final<|message|>4"
)


def test_split_whole_and_streamed() -> None:
    parser = get_reasoning_parser("openai_gptoss")()
    assert parser.extract(OUT) == ("Two plus two.", "4")
    assert parser.extract("<|channel|>analysis<|message|>still thinking") == (
        "still thinking", None,
    )  # fmt: skip
    streamer = ReasoningStreamer(get_reasoning_parser("openai_gptoss")())
    reasoning = content = ""
    for i in range(1, len(OUT) + 1):
        d = streamer.update(OUT[:i], final=i == len(OUT))
        reasoning += d.reasoning_content or ""
        content += d.content or ""
    assert (reasoning, content) == ("Two plus two.", "4")


def test_structured_outputs_wait_for_the_final_channel() -> None:
    tok = harmony_tokenizer()
    cls = get_reasoning_parser("openai_gptoss")
    assert cls.start_marker is not None and cls.end_marker is not None

    def ids(text: str) -> list[int]:
        return list(tok.encode(text, add_special_tokens=False))

    gate = TokenMarkers(ids(cls.start_marker), ids(cls.end_marker))
    prompt = ids("<|start|>user<|message|>2+2?<|end|><|start|>assistant")
    assert gate.prompt_state(prompt, cls.thinking_of({})) == "open"
    out = ids(OUT[:-1])  # up to and including <|message|> of the final channel
    assert gate.ends(out) and not gate.ends(out[:-1])
    assert not gate.ends(ids("<|channel|>analysis<|message|>"))
