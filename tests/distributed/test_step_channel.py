"""The step channel (distributed/step_channel.py) and the gloo group under it
(distributed/comm.py), with both ranks as threads of this process: payloads that fit the
frame take one broadcast, larger ones a second of their exact size. Both with gloo's
default device and with one bound to an explicit address (what the Ray backend does)."""

from __future__ import annotations

import multiprocessing
import threading
import time
from typing import Any

import pytest
import torch

from actorllm.distributed.comm import GlooComm, host_store, join_store
from actorllm.distributed.step_channel import Op, StepChannel


@pytest.mark.parametrize("host", [None, "127.0.0.1"])
def test_frames_and_overflows_arrive_in_order(host: str | None) -> None:
    store = host_store(2)
    comms: dict[int, GlooComm] = {}

    def join(rank: int) -> None:
        s = store if rank == 0 else join_store("127.0.0.1", store.port, 2)
        comms[rank] = GlooComm(s, rank, 2, collective_timeout_s=30.0, host=host)

    joiner = threading.Thread(target=join, args=(1,))
    joiner.start()
    join(0)
    joiner.join()
    sent = [(Op.STEP, 0, torch.arange(5)), (Op.RPC, 2, None), (Op.STEP, 0, torch.arange(100))]
    got: list[tuple[Op, int, torch.Tensor | None]] = []

    def receive() -> None:
        channel = StepChannel(comms[1], inline=16)
        got.extend(channel.recv() for _ in sent)
        assert comms[1].min_int(7) == 3

    receiver = threading.Thread(target=receive)
    receiver.start()
    channel = StepChannel(comms[0], inline=16)
    for op, arg, payload in sent:
        channel.send(op, arg, payload)
    assert comms[0].min_int(3) == 3
    receiver.join(30)
    assert [(op, arg) for op, arg, _ in got] == [(op, arg) for op, arg, _ in sent]
    assert got[1][2] is None
    for (_, _, mine), (_, _, theirs) in zip(sent[::2], got[::2], strict=True):
        assert theirs is not None and mine is not None and theirs.tolist() == mine.tolist()
    assert (channel.frames, channel.overflows) == (3, 1)  # 100 elements did not fit 16
    stats = comms[0].statistics()
    assert stats.broadcasts == 4 and stats.rank == 0
    for comm in comms.values():
        comm.close()


def _join_and_stop_reading(port: int, joined: Any) -> None:  # rank 1, a spawned process
    comm = GlooComm(join_store("127.0.0.1", port, 2), 1, 2, collective_timeout_s=1.0)
    joined.set()
    time.sleep(600)
    comm.close()  # alive, never reading: what a SIGSTOPped rank looks like to rank 0


def test_a_receiver_that_stops_reading_fails_the_sender_within_the_timeout() -> None:
    """A hung rank (alive, not reading) fills the socket buffers: rank 0's send must fail
    after the collective timeout, not block the worker thread for the step group's day.
    Rank 1 is a process, so killing it closes the pair the stuck send is writing to."""
    ctx = multiprocessing.get_context("spawn")
    store = host_store(2)
    joined = ctx.Event()
    rank1 = ctx.Process(target=_join_and_stop_reading, args=(store.port, joined), daemon=True)
    rank1.start()
    try:
        comm = GlooComm(store, 0, 2, collective_timeout_s=1.0)
        assert joined.wait(60)
        big = torch.zeros(16_000_000, dtype=torch.int64)  # 128 MB: more than any socket buffer
        t0 = time.monotonic()
        # gloo words it "Timed out waiting ... for send" or "... timed out" by the path
        with pytest.raises(RuntimeError, match=r"(?i)timed out"):
            comm.broadcast(big)
        assert time.monotonic() - t0 < 20
    finally:
        rank1.kill()
        rank1.join(10)
    comm.close()
