"""vLLM 0.32's queue limits at the front door (``--max-num-queued-reqs``,
``--max-num-queued-tokens``): a coarse capacity valve and a TTFT guard that refuse a new
request with HTTP 503, so a load balancer or a client SDK retries it elsewhere.

* ``max_num_queued_reqs``: the open sequences (waiting or running; a request of ``n``
  samples counts ``n``) may not exceed it once the new request's are added;
* ``max_num_queued_tokens``: no new request while the prompts of the requests still in
  prefill (no output token yet) hold that many tokens. As vLLM's, a prompt counts whole
  until its first token comes, whatever its chunks and prefix-cache hits covered: the
  count is conservative. A prompt still being tokenized counts nothing yet.

As in vLLM, the server's generation routes check them before a response starts
(``check_admission``: completions and chat with their ``n``, responses and the chat batch
with one), not every ``generate`` call: an offline batch is not refused. Each refusal is
counted by reason (``RequestStats.rejected``: ``admission_rejections`` on /metrics,
vLLM's ``vllm:admission_rejections``).

    >>> from actorllm.engine.recovery.ledger import RequestLedger
    >>> queued_tokens(RequestLedger())
    0
"""

from __future__ import annotations

from actorllm.core.request_stats import RequestStats
from actorllm.engine.api.overload import RETRY_AFTER_S
from actorllm.engine.errors import MaxQueuedTokensError, QueueOverflowError
from actorllm.engine.recovery.ledger import RequestLedger


def open_sequences(ledger: RequestLedger) -> int:
    """Open requests' sequences: ``n`` each (a pooling request: one)."""
    return sum(getattr(entry.params, "n", 1) for entry in ledger)


def queued_tokens(ledger: RequestLedger) -> int:
    """Prompt tokens of the open requests that have no output token yet (vLLM's
    ``get_num_queued_tokens``)."""
    total = 0
    for entry in ledger:
        ids = entry.prompt_token_ids
        if ids is not None and not any(c.emitted for c in entry.children.values()):
            total += len(ids)
    return total


def check_admission(
    ledger: RequestLedger,
    max_num_queued_reqs: int | None,
    max_num_queued_tokens: int | None,
    stats: RequestStats,
    n: int = 1,
) -> None:
    """Refuse (``QueueOverflowError`` / ``MaxQueuedTokensError``, counted in ``stats``) a
    request of ``n`` sequences that a limit does not admit."""
    if max_num_queued_reqs is not None and open_sequences(ledger) + n > max_num_queued_reqs:
        stats.rejected("max_num_queued_reqs")
        raise QueueOverflowError(RETRY_AFTER_S)
    if max_num_queued_tokens is not None and queued_tokens(ledger) >= max_num_queued_tokens:
        stats.rejected("max_num_queued_tokens")
        raise MaxQueuedTokensError(RETRY_AFTER_S)
