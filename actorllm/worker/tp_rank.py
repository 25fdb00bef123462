"""Ranks 1..N-1 of a tensor-parallel group: a process that runs the same forward as rank 0.

:func:`rank_main` is the entry a launcher starts (``distributed/mp_launcher.py``: a spawned
process; ``distributed/ray_ranks.py``: a Ray actor's ``run`` call, on any node). It
builds this rank's model runner (its shards of the weights, its heads' KV cache), joins
the group, agrees on the KV block count with the others (the minimum), then serves rank
0's messages (``distributed/step_channel.py``) until told to stop:

* STEP: unpack the step's inputs (worker/tp_step.py), run the forward and every
  ``compute_logits`` rank 0 makes (each is a collective it must join); nothing is sampled
  here and no request state is kept: the KV cache is written at the slots rank 0 sent,
  LoRA rows use the adapter slots rank 0 sent (its fills reach this rank as RPCs,
  :func:`fill_lora_slot`, before the step that needs them), and embedding prompts' rows
  the embeddings rank 0 sent;
* RPC: read the call from the store, run it on this rank's :class:`Worker`, store the
  result (or the exception) for rank 0 to collect; ``sleep`` and ``wake_up`` come this
  way too, so rank 0 knows when every rank is done (a level-2 wake reloads weights);
* STOP: return (the process exits).

A failed collective (rank 0 died, the group was dropped) raises out of the loop and the
process exits; so does a parent that is gone (a thread watches it; under Ray the actor's
owner is the engine process, and Ray kills the actor when its owner dies).
"""

from __future__ import annotations

import os
import pickle
import threading
import time
from typing import Any

import msgspec
import torch

from actorllm.distributed.comm import GlooComm, join_store
from actorllm.distributed.step_channel import Op, StepChannel
from actorllm.worker.extension import worker_class
from actorllm.worker.model_runner import ModelRunner
from actorllm.worker.startup import RankSpec, build_model_runner, num_kv_blocks
from actorllm.worker.tp_step import unpack_step
from actorllm.worker.worker import Worker


def rank_main(rank: int, host: str, port: int, spec: RankSpec, parent_pid: int | None) -> None:
    """The entry of rank ``rank`` (``spec``: rank 0's, the group's size in it;
    ``host:port``: rank 0's rendezvous store; ``parent_pid``: the engine process to watch,
    None under Ray, whose actors fate-share with their owner)."""
    if parent_pid is not None:
        _watch_parent(parent_pid)
    spec = msgspec.structs.replace(spec, rank=rank)
    runner = build_model_runner(spec)
    runner.load_model()
    store = join_store(host, port, spec.world_size)
    store.set(f"loaded/{rank}", "1")  # rank 0 waits for every rank's, watching them live
    pipeline = spec.pipeline_parallel_size > 1
    bind = _gloo_host(spec)
    comm = GlooComm(store, rank, spec.world_size, spec.collective_timeout_s, bind, pipeline)
    runner.attach_tp(comm, None)
    blocks = comm.min_int(num_kv_blocks(spec, runner))
    runner.initialize_kv_cache(blocks)
    worker = worker_class(spec.worker_extension_cls)(
        runner, lambda: False, rank=rank, device=spec.device
    )
    store.set(f"ready/{rank}", "1")  # rank 0 sends no step before every rank can take it
    try:
        serve(StepChannel(comm), runner, worker, store, rank)
    finally:
        comm.close()


def _gloo_host(spec: RankSpec) -> str | None:
    """Ray: bind this rank's gloo pairs to its node's IP (peers may be on other nodes)."""
    if spec.backend != "ray":
        return None
    import ray

    return str(ray.util.get_node_ip_address())


def serve(channel: StepChannel, runner: ModelRunner, worker: Worker, store: Any, rank: int) -> None:
    """Answer rank 0's messages until STOP."""
    while True:
        op, arg, payload = channel.recv()
        if op is Op.STEP:
            assert payload is not None
            _step(runner, payload)
        elif op is Op.RPC:
            _rpc(worker, store, arg, rank)
        elif op is Op.STOP:
            return


def _step(runner: ModelRunner, packed: torch.Tensor) -> None:
    """The forward and the logits gathers of one step (rank 0 samples). Pipeline
    parallel: this rank's stage of the forward (it receives the previous stage's hidden
    states and sends its own on, models/llama.py); rank 0 holds the last stage and the
    logits."""
    model = runner._ready_model()
    step = unpack_step(packed, (runner.model_config.hidden_size, runner.dtype))
    if runner.lora is not None:  # rank 0's slots for this step's rows
        lora_rows = None if step.lora_rows is None else step.lora_rows.numpy()
        runner.lora.state.use(lora_rows, runner.device)
    kwargs = {} if step.prompt_embeds is None else {"prompt_embeds": step.prompt_embeds}
    with torch.inference_mode():
        hidden = model(step.input_ids, step.positions, step.meta, runner.kv_caches, **kwargs)
        if runner.pp_size > 1:  # [T, H]
            return
        for rows in step.logit_rows:
            model.compute_logits(hidden.index_select(0, rows))  # joins rank 0's gather


def fill_lora_slot(worker: Worker, slot: int, request: Any, reread: bool) -> None:
    """Rank 0 filled (or emptied) LoRA ``slot``: do the same with this rank's part of the
    adapter (read from ``request``'s path on this rank's node)."""
    runner = worker.model_runner
    assert isinstance(runner, ModelRunner) and runner.lora is not None, "a fill without LoRA"
    runner.lora.fill_slot(slot, request, reread)


def _rpc(worker: Worker, store: Any, seq: int, rank: int) -> None:
    try:
        # Unpickled inside the try: a callable this rank cannot import (a script's __main__
        # under Ray, whose workers do not run the script) fails the call, not the rank.
        method, args, kwargs = pickle.loads(store.get(f"rpc/{seq}"))
        result: tuple[bool, Any] = (True, worker.collective_rpc(method, args, kwargs))
        blob = pickle.dumps(result)
    except Exception as exc:  # the call's failure goes back to the caller, the rank serves on
        blob = pickle.dumps((False, _picklable(exc)))
    store.set(f"rpc/{seq}/{rank}", blob)


def _picklable(exc: Exception) -> Exception:
    try:
        pickle.dumps(exc)
        return exc
    except Exception:
        return RuntimeError(f"{type(exc).__name__}: {exc}")


def _watch_parent(parent_pid: int) -> None:
    """Exit when the engine process is gone (killed without a chance to stop us)."""

    def watch() -> None:
        while True:
            time.sleep(0.5)
            if os.getppid() != parent_pid:
                os._exit(1)

    threading.Thread(target=watch, name="actorllm-tp-parent", daemon=True).start()
