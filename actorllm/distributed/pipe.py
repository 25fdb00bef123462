"""A pipeline stage's link to its neighbours: the residual stream, stage to stage.

Stage ``s`` of ``P`` runs on rank ``(s + 1) % P``: ranks 1..P-1 hold stages 0..P-2 and
rank 0 (the engine's worker thread, which owns the requests and the sampler) holds the
last stage, so the stage that samples is the one that drives the step and no token ever
travels back. Each step, stage ``s`` sends its ``[2, T, H]`` (hidden, residual) to stage
``s + 1`` over the group's ``pipe`` process group (``distributed/comm.py``); the receiver
knows the shape from the step's token count.

    >>> stage_rank(0, 2), stage_rank(1, 2), rank_stage(0, 3), rank_stage(1, 3)
    (1, 0, 2, 0)
"""

from __future__ import annotations

from typing import final

import torch

from actorllm.distributed.comm import GlooComm


def stage_rank(stage: int, size: int) -> int:
    """The rank that holds pipeline stage ``stage`` (the last stage: rank 0)."""
    return (stage + 1) % size


def rank_stage(rank: int, size: int) -> int:
    """The pipeline stage rank ``rank`` holds."""
    return (rank - 1) % size


@final
class StageLink:
    """Rank ``comm.rank``'s side of the pipeline (models/pipeline.py's PipeLink)."""

    def __init__(self, comm: GlooComm, size: int) -> None:
        self.comm = comm
        stage = rank_stage(comm.rank, size)
        self.stage = stage
        self.prev = stage_rank(stage - 1, size) if stage > 0 else None
        self.next = stage_rank(stage + 1, size) if stage < size - 1 else None

    def send_stage(self, x: torch.Tensor) -> None:
        """x: [2, T, H] (hidden, residual) -> the next stage."""
        assert self.next is not None, "the last stage sends nothing on"
        self.comm.send(x.contiguous(), self.next)

    def recv_stage(self, x: torch.Tensor) -> None:
        """The previous stage's [2, T, H] into ``x``."""
        assert self.prev is not None, "the first stage receives nothing"
        self.comm.recv(x, self.prev)
