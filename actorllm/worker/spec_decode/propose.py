"""Drafts for the requests a step sampled, read from the input batch after it resolved."""

from __future__ import annotations

from collections.abc import Sequence

from actorllm.worker.input_batch import InputBatch
from actorllm.worker.spec_decode.draft_model import DraftModelProposer
from actorllm.worker.spec_decode.ngram import NgramProposer
from actorllm.worker.spec_decode.suffix import SuffixProposer
from actorllm.worker.step_output import TargetHidden

# EagleProposer is a DraftModelProposer
Proposer = NgramProposer | SuffixProposer | DraftModelProposer


def propose_drafts(
    proposer: Proposer,
    batch: InputBatch,
    slots: Sequence[int],
    hidden: TargetHidden | None = None,
) -> dict[str, list[int]]:
    """{req_id: drafts} for the requests in ``slots`` (their tokens all on the host).

    No drafts for a structured-outputs request (its grammar advances only over tokens the
    scheduler accepted, so each step samples one position under its mask). A draft run is
    cut so that every token the step could emit (the drafts, then one more) stays within
    ``max_tokens`` and the context length. An EAGLE head first catches up on ``hidden``
    (the step's hidden states) for every request of the step, drafting or not; suffix
    decoding records every request that sampled, drafting or not (its tokens feed the
    tries of the requests that come after it, as vLLM's).
    """
    out: dict[str, list[int]] = {}
    todo: list[tuple[int, str, int]] = []  # (slot, req_id, room)
    seen: list[tuple[int, str, int]] = []  # the same, with rooms of 0 (suffix decoding)
    for slot in slots:
        req_id, p = batch.req_ids[slot], batch.params[slot]
        if req_id is None or p is None:
            continue
        n = int(batch.num_tokens[slot])
        room = batch.max_model_len - n - 1
        if p.max_tokens is not None:
            room = min(room, p.max_tokens - (n - int(batch.num_prompt_tokens[slot])) - 1)
        if p.structured_outputs is not None:
            room = 0
        seen.append((slot, req_id, max(room, 0)))
        if room > 0:
            todo.append((slot, req_id, room))
    if isinstance(proposer, SuffixProposer):
        runs = proposer.propose(batch, [t[0] for t in seen], [t[2] for t in seen])
        return {rid: run for (_, rid, _), run in zip(seen, runs, strict=True) if run}
    if isinstance(proposer, DraftModelProposer):  # a draft model or an EAGLE head
        runs = proposer.propose(batch, [t[0] for t in todo], [t[2] for t in todo], hidden)
        return {rid: run for (_, rid, _), run in zip(todo, runs, strict=True) if run}
    for slot, req_id, room in todo:
        n = int(batch.num_tokens[slot])
        drafts = proposer.propose_one(batch.token_ids[slot, :n], room)
        if len(drafts):
            out[req_id] = drafts.tolist()
    return out
