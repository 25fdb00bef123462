"""Rank 0 -> ranks 1..N-1: one op per message, one broadcast per message (usually).

Every message is a fixed-size int64 frame of ``INLINE`` elements broadcast on the group's
step channel: ``[op, arg, payload_len, payload ...]``. A payload that does not fit (a long
prefill's token ids and block tables) follows in a second broadcast of exactly
``payload_len`` elements; the frame said how many, so the receivers can allocate it. A
decode step of a few dozen requests fits the frame: one broadcast per step, and no pickle.

    channel = StepChannel(comm)
    channel.send(Op.STEP, 0, packed)     # rank 0
    op, arg, payload = channel.recv()    # ranks 1..N-1, blocks until rank 0 sends
"""

from __future__ import annotations

import enum
from typing import final

import torch

from actorllm.distributed.comm import GlooComm

INLINE = 4096  # int64 elements per frame (32 KiB); a larger payload takes a second broadcast
_HEAD = 3  # op, arg, payload_len


class Op(enum.IntEnum):
    STEP = 1  # payload: worker/tp_step.py's packed step
    RPC = 4  # arg: the call's sequence number; the call itself is in the store
    STOP = 5


@final
class StepChannel:
    def __init__(self, comm: GlooComm, inline: int = INLINE) -> None:
        self.comm = comm
        self._frame = torch.zeros(inline, dtype=torch.int64)  # reused: one frame in flight
        self.frames = 0
        self.overflows = 0  # messages that needed the second broadcast

    def send(self, op: Op, arg: int = 0, payload: torch.Tensor | None = None) -> None:
        """Rank 0: broadcast one message. payload: [P] int64 or None."""
        n = 0 if payload is None else payload.numel()
        frame = self._frame
        frame[0], frame[1], frame[2] = int(op), arg, n
        fits = _HEAD + n <= frame.numel()
        if payload is not None and fits:
            frame[_HEAD : _HEAD + n] = payload
        self.comm.broadcast(frame)
        self.frames += 1
        if payload is not None and not fits:
            self.comm.broadcast(payload.contiguous())
            self.overflows += 1

    def recv(self) -> tuple[Op, int, torch.Tensor | None]:
        """Ranks 1..N-1: the next message (blocks until rank 0 sends it)."""
        frame = self._frame
        self.comm.broadcast(frame)
        op, arg, n = (int(v) for v in frame[:_HEAD].tolist())
        if n == 0:
            return Op(op), arg, None
        if _HEAD + n <= frame.numel():
            return Op(op), arg, frame[_HEAD : _HEAD + n].clone()
        payload = torch.empty(n, dtype=torch.int64)
        self.comm.broadcast(payload)
        return Op(op), arg, payload
