"""Device-side token feeding for async scheduling.

Under async scheduling the scheduler builds step N+1 before step N's tokens are back on the
host: a running request's next input is a *placeholder*. The runner keeps every request's
latest sampled token in a persistent device tensor indexed by batch slot
(:attr:`TokenFeed.last_sampled`); planning step N+1 on the host marks the input rows whose
token is still pending (``InputPlan.fill_rows``) and where it lives (``fill_src``, the slot
that sampled it: rows may have moved since), and :meth:`TokenFeed.fill` gathers them into
step N+1's ``input_ids`` on the device. The host never waits for step N's tokens before
launching step N+1; stream order (both run on the compute stream) makes the gather read
step N's sampler output.

Works the same on CPU tensors (where it is tested).

    feed = TokenFeed(max_num_seqs=4, device=torch.device("cpu"))
    feed.record(torch.tensor([0, 2]), torch.tensor([11, 12]))
    ids = torch.zeros(3, dtype=torch.int64)
    feed.fill(ids, torch.tensor([1]), torch.tensor([2]))   # ids == [0, 12, 0]
"""

from __future__ import annotations

import torch


class TokenFeed:
    """Per-slot latest sampled token, on the device. Worker thread only."""

    def __init__(self, max_num_seqs: int, device: torch.device) -> None:
        self.last_sampled = torch.zeros(max_num_seqs, dtype=torch.int64, device=device)  # [S]
        self.num_fills = 0  # statistics: steps that took a token from the device

    def record(self, slots: torch.Tensor, sampled: torch.Tensor) -> None:
        """slots: [N] int64 slots that sampled; sampled: [N] int64 their tokens."""
        if slots.numel():
            self.last_sampled.index_copy_(0, slots, sampled)

    def fill(self, input_ids: torch.Tensor, rows: torch.Tensor, src: torch.Tensor) -> None:
        """input_ids: [T] int64, in place: ``input_ids[rows] = last_sampled[src]``.

        rows, src: [F] int64 on the same device. No host sync.
        """
        if rows.numel():
            input_ids.index_copy_(0, rows, self.last_sampled.index_select(0, src))
            self.num_fills += 1

    def statistics(self) -> dict[str, int]:
        return {"fills": self.num_fills, "slots": self.last_sampled.numel()}
