"""When a request stops, checked after each appended token.

Order (the first that applies wins):

1. a stop token: one of ``stop_token_ids``, or EOS unless ``ignore_eos``. Neither fires
   before ``min_tokens`` outputs precede it — the stop token is at the earliest output
   number ``min_tokens + 1``, matching a sampler that masks stop tokens while fewer than
   ``min_tokens`` outputs exist. ``stop_reason`` is the token id, or None for EOS.
2. ``max_tokens`` outputs (outputs carried by a resumed request count);
3. ``max_model_len`` tokens in all (prompt + outputs);
4. once ``min_tokens`` outputs exist, ``repetition_detection``: the outputs end in an
   N-gram repeated ``min_count`` times (vLLM's rule, ``core/repetition.py``):
   FINISHED_REPETITION, ``stop_reason`` "repetition_detected".

Stop *strings* are found downstream (the output processor), which then finishes the request
through ``Scheduler.finish_requests``.
"""

from __future__ import annotations

from actorllm.core.repetition import has_repetition
from actorllm.core.request import Request, RequestStatus


def check_stop(request: Request, max_model_len: int) -> RequestStatus | None:
    """The finished status the last appended token puts ``request`` in, or None.

    Sets ``request.stop_reason`` when a stop token fires.
    """
    tokens = request.all_token_ids  # (runs once per token: no property twice)
    last = tokens[-1]
    if last in request.stop_token_ids:
        params = request.sampling_params
        if request.num_output_tokens > params.min_tokens:
            explicit = params.stop_token_ids or ()
            request.stop_reason = (
                None if last == request.eos_token_id and last not in explicit else last
            )
            return RequestStatus.FINISHED_STOPPED
    max_tokens = request.max_tokens
    if max_tokens is not None and request.num_output_tokens >= max_tokens:
        return RequestStatus.FINISHED_LENGTH_CAPPED
    if len(tokens) >= max_model_len:
        return RequestStatus.FINISHED_LENGTH_CAPPED
    detect = request.sampling_params.repetition_detection
    if detect is not None and detect.max_pattern_size > 0:
        params = request.sampling_params
        if request.num_output_tokens >= params.min_tokens and has_repetition(
            request.output_token_ids, detect
        ):
            request.stop_reason = "repetition_detected"
            return RequestStatus.FINISHED_REPETITION
    return None


def reached_limit_in_flight(request: Request, max_model_len: int) -> bool:
    """True when the tokens already in flight take the request to its length limit.

    Such a request is not scheduled again: the step in flight produces its last token.
    """
    pending = request.num_output_placeholders
    if request.max_tokens is not None and request.num_output_tokens + pending >= request.max_tokens:
        return True
    return request.num_tokens + pending >= max_model_len
