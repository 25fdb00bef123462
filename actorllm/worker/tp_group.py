"""Rank 0's side of a tensor-parallel group: it starts the other ranks, sends them every
step and control call, and is replaced whole when one of them fails.

Theory of operation
-------------------
Rank 0 is the engine's worker thread under ``mp`` and a replica's Ray actor under ``ray``
(``worker/remote.py``); its :class:`~actorllm.worker.worker.Worker` owns this
group. Ranks 1..N-1 are processes a launcher starts (``distributed/launcher.py``:
``mp``, spawned on this node, or ``ray``, Ray actors in rank 0's placement group, on any
node of the cluster) running :func:`~actorllm.worker.tp_rank.rank_main`. Every method
here runs on rank 0's thread, except :meth:`_on_exit` (the launcher's monitor thread).

* **Start** (:meth:`launch`, then :meth:`connect` once rank 0's runner is loaded): rank 0
  hosts the rendezvous store (at 127.0.0.1 for ``mp``; at its node's IP for ``ray``, with
  every rank's gloo pairs bound to its own node's IP, so ranks may be on other nodes),
  the launcher starts the ranks (they load their shards in parallel with rank 0), and
  every rank joins the gloo groups (``distributed/comm.py``).
* **Each step**: the runner calls :meth:`send_step` just before its forward: one
  broadcast of the packed inputs (``distributed/step_channel.py``). The forward's
  all-reduces and the logits gather then run in lockstep on every rank. LoRA: the step
  carries each row's adapter slot; a slot rank 0 fills or empties is filled or emptied on
  every rank first (an RPC, :meth:`_fill_lora`), and again after a restart.
* **Failure**: a rank that dies is seen by the launcher's monitor (its sentinel) or by
  rank 0's next collective (gloo fails at once when a peer's connection closes; a *hung*
  peer fails it after ``tp_collective_timeout_s``). Either way the group is marked
  :attr:`broken` (with why) and ``notify(generation, why)`` tells the executor, which
  crashes like after any failed step: the core restarts and its new incarnation's first
  job, ``Worker.reset_requests``, calls :meth:`restart`: stop every rank, start a new group
  (``generation + 1``), agree on the same KV block count. Requests are rebuilt from the
  ledger as after any executor crash.
"""

from __future__ import annotations

import contextlib
import os
import pickle
import threading
import time
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any, final

import cloudpickle
import msgspec
import torch

from actorllm.core.errors import InvalidRequestError
from actorllm.distributed.comm import GlooComm, host_store
from actorllm.distributed.launcher import RankLauncher
from actorllm.distributed.mp_launcher import MpRankGroup
from actorllm.distributed.step_channel import Op, StepChannel
from actorllm.worker.startup import RankSpec
from actorllm.worker.step_inputs import StepInputs
from actorllm.worker.tp_errors import RankGroupError
from actorllm.worker.tp_rank import fill_lora_slot, rank_main
from actorllm.worker.tp_step import pack_step

if TYPE_CHECKING:
    from actorllm.worker.model_runner import ModelRunner

LOAD_TIMEOUT_S = 600.0  # ranks 1..N-1 spawned, loaded and joined

# notify(generation, why): the group of that generation broke (any thread).
Notify = Callable[[int, str], None]


class TPGroupStatistics(msgspec.Struct, frozen=True, kw_only=True):
    replica: int  # the data-parallel replica whose group this is
    world_size: int
    generation: int  # 0 for the first group, +1 per restart
    broken: str | None  # why the current group is broken, if it is
    ranks: object  # the launcher's statistics (where ranks 1..N-1 run)
    frames: int  # step-channel messages sent
    overflows: int  # messages whose payload needed a second broadcast


@final
class TPGroup:
    def __init__(self, spec: RankSpec, replica: int = 0, placement_group: Any = None) -> None:
        self.spec = spec  # rank 0's; the ranks build from it with their own rank
        self.replica = replica  # data parallel: each replica owns a group of its own
        # Ray, rank 0 remote (worker/remote.py): the replica's placement group,
        # bundle 0 holding rank 0; ranks 1..N-1 take the others.
        self.placement_group = placement_group
        self.world_size = spec.world_size
        self.generation = 0
        self.broken: str | None = None  # written by the worker thread or the monitor
        self.notify: Notify | None = None  # set by each executor incarnation
        self.comm: GlooComm | None = None
        self.channel: StepChannel | None = None
        self._store: Any = None
        self._launcher: RankLauncher | None = None
        self._gloo_host: str | None = None  # Ray: this node's IP
        self._runner: ModelRunner | None = None  # rank 0's, hooked by connect()
        self._rpc_seq = 0
        self._lock = threading.Lock()  # broken / notify, between the two threads

    # -- lifecycle (worker thread) ----------------------------------------------------------

    @property
    def backend(self) -> str:
        return self.spec.backend

    @property
    def launcher(self) -> RankLauncher | None:
        """The current group's launcher (MpRankGroup or RayRankGroup), None when stopped."""
        return self._launcher

    def launch(self) -> None:
        """Host the rendezvous and start ranks 1..N-1 (they load while rank 0 does).
        Ray: raises :class:`~actorllm.distributed.ray_connect.RayClusterError` when no
        cluster is reachable or it cannot place the ranks."""
        launcher: RankLauncher
        if self.backend == "ray":
            from actorllm.distributed.ray_connect import connect
            from actorllm.distributed.ray_ranks import RayRankGroup

            # The store's address as the other nodes see this one (the server listens on
            # every interface); each rank binds its gloo pairs to its own node's IP.
            host = connect().util.get_node_ip_address()
            self._gloo_host = host
            launcher = RayRankGroup(
                self.world_size,
                bundle={"CPU": 1},
                name=self._name,
                placement_group=self.placement_group,
            )
            parent = None
        else:
            host, parent = "127.0.0.1", os.getpid()
            launcher = MpRankGroup(self.world_size, name=self._name)
        self._store = host_store(self.world_size)
        port, gen, spec = self._store.port, self.generation, self.spec
        self._launcher = launcher
        launcher.start(
            rank_main,
            lambda rank: (rank, host, port, spec, parent),
            lambda rank, why: self._on_exit(gen, why),
        )

    @property
    def _name(self) -> str:
        """How the group's processes are named (``ps``, Ray's placement group)."""
        kind = "pp" if self.spec.pipeline_parallel_size > 1 else "tp"
        if self.spec.data_parallel_size > 1:
            return f"actorllm-dp{self.replica}-{kind}"
        return f"actorllm-{kind}"

    def connect(self, runner: ModelRunner) -> GlooComm:
        """Join the group as rank 0 (blocks until every rank has loaded and joined) and
        hook ``runner``'s model and forward to it. Raises :class:`RankGroupError` when a
        rank dies before it has loaded, or none has after ``LOAD_TIMEOUT_S``."""
        self._wait_loaded()
        timeout = self.spec.collective_timeout_s
        pipeline = self.spec.pipeline_parallel_size > 1
        comm = GlooComm(self._store, 0, self.world_size, timeout, self._gloo_host, pipeline)
        self.comm, self.channel, self._runner = comm, StepChannel(comm), runner
        runner.attach_tp(comm, self.send_step)
        if runner.lora is not None:
            runner.lora.on_fill = self._fill_lora
        return comm

    def _wait_loaded(self) -> None:
        """Poll the store for every rank's "loaded" key, failing fast when the monitor
        reports a rank's death (a gloo rendezvous would wait out its whole timeout)."""
        keys = [f"loaded/{r}" for r in range(1, self.world_size)]
        deadline = time.monotonic() + LOAD_TIMEOUT_S
        while not self._store.check(keys):
            if self.broken is not None:
                hint = (
                    "Ray's report above carries its traceback (its output is in the Ray "
                    "session's worker logs on its node); every node of the cluster needs "
                    "actorllm, and the model at the same path"
                    if self.backend == "ray"
                    else "its error is on stderr. A script that opens a tensor-parallel "
                    "engine at import time needs `if __name__ == '__main__':` (spawn "
                    "imports the main module)"
                )
                raise RankGroupError(
                    f"a tensor-parallel rank failed to start ({self.broken}); {hint}."
                )
            if time.monotonic() > deadline:
                raise RankGroupError(f"tensor-parallel ranks not loaded after {LOAD_TIMEOUT_S}s")
            time.sleep(0.05)

    def agree_blocks(self, blocks: int) -> int:
        """The KV block count every rank can hold (the minimum of each rank's); returns
        once every rank has allocated its KV cache and serves the step channel (rank 0's
        first broadcast waits on them with the collective timeout, and a rank allocating
        a large cache on a busy host could miss it)."""
        assert self.comm is not None
        agreed = self.comm.min_int(blocks)
        keys = [f"ready/{r}" for r in range(1, self.world_size)]
        self._await_keys(keys, LOAD_TIMEOUT_S, "the ranks' KV caches")
        return agreed

    def restart(self) -> None:
        """Replace a broken group by a new one with the same KV block count (rank 0's
        runner, the one :meth:`connect` hooked, stays)."""
        runner = self._runner
        assert runner is not None, "restart() before connect()"
        self.stop(grace_s=0.0)
        with self._lock:
            self.generation += 1
            self.broken = None
        self.launch()
        self.connect(runner)
        blocks = self.agree_blocks(runner.num_blocks)
        if blocks != runner.num_blocks:
            self.mark_broken(
                f"the restarted ranks hold {blocks} KV blocks, not {runner.num_blocks}"
            )
            raise RankGroupError(self.broken)
        if runner.lora is not None:  # the adapters resident before are resident after
            for slot, request in runner.lora.resident():
                self._fill_lora(slot, request, False)

    def stop(self, grace_s: float = 5.0) -> None:
        """Tell the ranks to return (when the group is healthy), then end them. Marks the
        group broken first, silently: the ranks' exits are not failures to report."""
        with self._lock:
            healthy, self.broken = self.broken is None, self.broken or "stopped"
        if self.channel is not None and healthy:
            with contextlib.suppress(Exception):  # stopping anyway
                self.channel.send(Op.STOP)
        if self._launcher is not None:
            self._launcher.stop(grace_s)
        if self.comm is not None:
            self.comm.close()
        self.comm = self.channel = self._launcher = self._store = None

    # -- failure ----------------------------------------------------------------------------

    def mark_broken(self, why: str) -> None:
        """The current group can no longer step (any thread); tells the executor once."""
        with self._lock:
            if self.broken is not None:
                return
            self.broken = why
            notify, gen = self.notify, self.generation
        if notify is not None:
            notify(gen, why)

    def _on_exit(self, generation: int, why: str) -> None:  # the launcher's monitor thread
        if generation == self.generation:
            if self.spec.data_parallel_size > 1:
                why = f"data-parallel replica {self.replica}: {why}"
            self.mark_broken(why)

    def _check(self) -> StepChannel:
        if self.broken is not None or self.channel is None:
            raise RankGroupError(f"the tensor-parallel group is broken: {self.broken}")
        return self.channel

    # -- per step and control (worker thread) -----------------------------------------------

    def send_step(self, step: StepInputs, logit_rows: list[torch.Tensor]) -> None:
        """The runner's ``before_forward``: broadcast the step's inputs to the ranks."""
        meta = step.attn_metadata
        lora = self._runner.lora if self._runner is not None else None
        rows = lora.state.row_slots if lora is not None else None  # [T] or None
        lora_rows = None if rows is None else torch.from_numpy(rows)
        embeds = step.prompt_embeds
        if embeds is not None and self._runner is not None:  # as the model will read them
            embeds = (embeds[0], embeds[1].to(self._runner.dtype))
        packed = pack_step(step.input_ids, step.positions, meta, logit_rows, lora_rows, embeds)
        self._check().send(Op.STEP, 0, packed)

    def _fill_lora(self, slot: int, request: Any, reread: bool) -> None:
        """Rank 0 filled or emptied LoRA ``slot`` (between steps, or while planning one):
        the ranks do the same, each reading its part of the adapter, before anything else
        reaches them; raises the first rank's error (an adapter path it cannot read)."""
        seq = self.start_rpc(fill_lora_slot, (slot, request, reread), None)
        # Reading a rank's part of an adapter takes well under a collective's timeout.
        self.rpc_results(seq, timeout_s=self.spec.collective_timeout_s)

    def start_rpc(
        self,
        method: str | Callable[..., Any],
        args: tuple[Any, ...],
        kwargs: Mapping[str, Any] | None,
    ) -> int:
        """Send a collective_rpc to ranks 1..N-1 (by cloudpickle, as vLLM: lambdas and
        closures travel by value, importable functions by reference); returns the call's
        number for :meth:`rpc_results`."""
        channel = self._check()
        try:
            call = cloudpickle.dumps((method, args, dict(kwargs or {})))
        except Exception as e:
            raise InvalidRequestError(
                "collective_rpc under tensor parallel sends the call to every rank by "
                f"cloudpickle, and this one does not pickle ({type(e).__name__}: {e}).",
                param="method",
            ) from e
        self._rpc_seq += 1
        self._store.set(f"rpc/{self._rpc_seq}", call)
        channel.send(Op.RPC, self._rpc_seq)
        return self._rpc_seq

    def rpc_results(self, seq: int, timeout_s: float | None = None) -> list[Any]:
        """Ranks 1..N-1's results of call ``seq`` (blocks until each has answered); a
        rank's exception is raised here. A rank that dies meanwhile (or, with
        ``timeout_s``, does not answer in time) breaks the group: :class:`RankGroupError`."""
        results = []
        keys = [f"rpc/{seq}/{rank}" for rank in range(1, self.world_size)]
        self._await_keys(keys, timeout_s, f"collective_rpc #{seq}")
        for key in keys:
            ok, value = pickle.loads(self._store.get(key))
            if not ok:
                raise value
            results.append(value)
        return results

    def _await_keys(self, keys: list[str], timeout_s: float | None, what: str) -> None:
        """Poll the store for ``keys`` (a blocking get would outlive a dead rank by the
        store's whole timeout), watching :attr:`broken`."""
        deadline = None if timeout_s is None else time.monotonic() + timeout_s
        pause = 0.0002
        while not self._store.check(keys):
            if self.broken is not None:
                raise RankGroupError(f"{what}: the tensor-parallel group broke: {self.broken}")
            if deadline is not None and time.monotonic() > deadline:
                self.mark_broken(f"{what}: a rank did not answer in {timeout_s:g} s")
                raise RankGroupError(self.broken)
            time.sleep(pause)
            pause = min(pause * 2, 0.02)

    def rank_pid(self, rank: int) -> int:
        """The process id of rank ``rank`` (>= 1; tests kill it; Ray: on its node)."""
        assert self._launcher is not None
        return self._launcher.pid(rank)

    def statistics(self) -> TPGroupStatistics:
        channel, launcher = self.channel, self._launcher
        return TPGroupStatistics(
            replica=self.replica,
            world_size=self.world_size,
            generation=self.generation,
            broken=self.broken,
            ranks=launcher.statistics() if launcher is not None else None,
            frames=channel.frames if channel is not None else 0,
            overflows=channel.overflows if channel is not None else 0,
        )
