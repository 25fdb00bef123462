"""Long outputs on the output processor's general path (stop strings, n > 1, logprobs):
the text a step adds is searched and sent without reading the whole text again, and the
outputs are those of a whole-text reference, across the joins of the text's pieces."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from actorllm.core import output_state
from actorllm.core.engine_core_output import EngineCoreOutput, EngineCoreOutputs, FinishReason
from actorllm.core.output_processor import OutputProcessor
from actorllm.core.output_state import RequestState
from actorllm.core.sampling_params import RequestOutputKind, SamplingParams
from tests.helpers.tokenizers import demo_tokenizer

DELTA, CUMULATIVE, FINAL_ONLY = (
    RequestOutputKind.DELTA,
    RequestOutputKind.CUMULATIVE,
    RequestOutputKind.FINAL_ONLY,
)
WORDS = ["the", "of", "answer", "stop", "end", "</a>", "x", "42", "\n", "  ", "é", "λόγος"]


def _reference(
    tokens: list[int], stops: list[str], min_tokens: int, include: bool
) -> tuple[str, str | None]:
    """The final text and stop reason from the whole text: the stop string completed first
    (the smallest end; on a tie the longest) among those ending after the text the first
    ``min_tokens`` tokens completed. As vLLM's detokenizer counts it, that is the text a
    stream had emitted by then: a token that ends inside a character emits nothing until
    the character is whole, so its text (and that character) is later text."""
    tok = demo_tokenizer()
    text = tok.decode(tokens, skip_special_tokens=True)
    emitted = min(min_tokens, len(tokens))
    while emitted and tok.decode(tokens[:emitted], skip_special_tokens=True).endswith("\ufffd"):
        emitted -= 1  # (the stream still held these tokens' text)
    protected = len(tok.decode(tokens[:emitted], skip_special_tokens=True))
    best: tuple[int, int, str] | None = None  # (end, -len, stop)
    for stop in stops:
        at = text.find(stop, max(0, protected - len(stop) + 1))
        if at >= 0 and (best is None or (at + len(stop), -len(stop)) < best[:2]):
            best = (at + len(stop), -len(stop), stop)
    if best is None:
        return text, None
    end, neg_len, stop = best
    return text[: end if include else end + neg_len], stop


def _run(
    tokens: list[int], chunks: list[int], kind: RequestOutputKind, **params: object
) -> tuple[str, str | None, list[str]]:
    """Feed ``tokens`` in steps of ``chunks`` tokens (the last step finishes the request
    for length, as the scheduler would); the final text, the stop reason and every
    output's text."""
    op = OutputProcessor(demo_tokenizer())
    sp = SamplingParams(max_tokens=len(tokens) + 64, output_kind=kind, **params)  # type: ignore[arg-type]
    op.add_request("r", "p", [5, 6], sp, arrival_time=0.0)
    texts: list[str] = []
    final = None
    i = c = 0
    while final is None:
        n = chunks[c % len(chunks)]
        new = tokens[i : i + n]
        i += n
        c += 1
        last = FinishReason.LENGTH if i >= len(tokens) else None
        eco = EngineCoreOutputs(
            step_id=c,
            outputs=[EngineCoreOutput(req_id="r", new_token_ids=new, finish_reason=last)],
            timestamp=float(c),
        )
        for _, ro in op.process_outputs(eco).request_outputs:
            texts.append(ro.outputs[0].text)
            if ro.finished:
                final = ro.outputs[0]
    text = "".join(texts) if kind == DELTA else final.text
    stop = final.stop_reason if isinstance(final.stop_reason, str) else None
    return text, stop, texts


@settings(max_examples=100, deadline=None)
@given(
    words=st.sampled_from([1, 8, 40, 300, 700]).flatmap(
        lambda n: st.lists(st.sampled_from(WORDS), min_size=n, max_size=n + 20)
    ),
    extra_stops=st.lists(st.sampled_from(["never", "</a>", "42", "of the", "\n  "]), max_size=2),
    cut=st.tuples(st.integers(0, 10_000), st.integers(1, 14)),
    chunks=st.lists(st.integers(1, 3), min_size=1, max_size=4),
    kind=st.sampled_from([DELTA, CUMULATIVE, FINAL_ONLY]),
    include=st.booleans(),
    min_tokens=st.sampled_from([0, 0, 3, 40]),
    late=st.booleans(),
)
def test_stop_strings_match_a_whole_text_reference(
    words: list[str],
    extra_stops: list[str],
    cut: tuple[int, int],
    chunks: list[int],
    kind: RequestOutputKind,
    include: bool,
    min_tokens: int,
    late: bool,
) -> None:
    source = " ".join(words)
    # late: the stop string is cut from the text's last 60 characters, so a long text
    # runs through several joins of its pieces before it (or an earlier copy) is found
    start = len(source) - 1 - cut[0] % min(60, len(source)) if late else cut[0] % len(source)
    stops = [source[start : start + cut[1]], *extra_stops]
    tokens = demo_tokenizer().encode(source, add_special_tokens=False).ids
    want_text, want_stop = _reference(tokens, stops, min_tokens, include)
    got_text, got_stop, pieces = _run(
        tokens, chunks, kind, stop=stops, include_stop_str_in_output=include, min_tokens=min_tokens
    )
    assert (got_text, got_stop) == (want_text, want_stop)
    if kind == DELTA and not include and want_stop is not None and not min_tokens:
        # the stop string was never sent, not even in the outputs before the last
        assert all(want_stop not in "".join(pieces[: k + 1]) for k in range(len(pieces)))


def test_min_tokens_protects_the_text_its_tokens_completed_not_a_held_character() -> None:
    # "the λόγος ...": token 2 is " " and the first byte of "λ", so the stream emits
    # nothing at token 2 and " λ" at token 3. With min_tokens=2 that space is text of
    # token 3 (vLLM's detokenizer moves its stop-check offset only past emitted text), so
    # the stop " " ends the text there, not at the next space.
    tokens = demo_tokenizer().encode("the λόγος λόγος λόγος", add_special_tokens=False).ids
    assert demo_tokenizer().decode(tokens[:2]) == "the \ufffd"  # token 2 ends inside "λ"
    for kind in (DELTA, CUMULATIVE, FINAL_ONLY):
        text, stop, _ = _run(tokens, [1], kind, stop=[" "], min_tokens=2)
        assert (text, stop) == ("the", " ")
        assert _reference(tokens, [" "], 2, include=False) == ("the", " ")


def test_long_stream_text_crosses_piece_joins() -> None:
    # Far more tokens than one run of pieces: every step's delta is the text's next piece,
    # the stop string straddles a join and is found there.
    tokens = demo_tokenizer().encode("the of " * 700 + "</a> end", add_special_tokens=False).ids
    assert len(tokens) > 3 * output_state.PIECES_PER_JOIN
    text, stop, _ = _run(tokens, [1], DELTA, stop=["</a>"])
    assert stop == "</a>" and text == "the of " * 700


@pytest.mark.parametrize(
    "params",
    [{"stop": ["never"]}, {"stop": ["never"], "include_stop_str_in_output": True}, {"n": 2}],
)
def test_a_delta_step_does_not_read_the_whole_text(
    params: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    # A long stream's step on the general path: the text property (which joins the whole
    # text) is not read or written per token. Before: one copy of the whole text a token.
    calls = []
    prop = RequestState.text

    def get(self: RequestState) -> str:
        calls.append(1)
        return prop.fget(self)  # type: ignore[misc]

    def put(self: RequestState, value: str) -> None:
        calls.append(1)
        prop.fset(self, value)  # type: ignore[misc]

    monkeypatch.setattr(RequestState, "text", property(get, put))
    tokens = demo_tokenizer().encode("the of answer " * 200, add_special_tokens=False).ids
    op = OutputProcessor(demo_tokenizer())
    sp = SamplingParams(max_tokens=10_000, output_kind=DELTA, **params)  # type: ignore[arg-type]
    children = [rid for rid, _ in op.add_request("r", "p", [5, 6], sp, arrival_time=0.0)]
    shown: dict[int, str] = {}
    for i, tok in enumerate(tokens):
        eco = EngineCoreOutputs(
            step_id=i,
            outputs=[EngineCoreOutput(req_id=c, new_token_ids=[tok]) for c in children],
            timestamp=float(i),
        )
        for _, ro in op.process_outputs(eco).request_outputs:
            for c in ro.outputs:
                shown[c.index] = shown.get(c.index, "") + c.text
    assert calls == []
    assert len(shown) == len(children)
    for text in shown.values():  # (all but the held-back tail of a stop string's length)
        assert "the of answer " * 190 in text
