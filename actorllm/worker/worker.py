"""``Worker``: the object on the worker thread that owns the model runner (vLLM's Worker).

Everything here runs on the engine's one worker thread (worker/worker_thread.py), in the
order the executor queued it. The executor's step jobs call :meth:`Worker.execute_step`;
control calls (sleep, wake-up, resets) and ``AsyncEngine.collective_rpc`` run *between*
steps: each first resolves the steps still pending in the launch pipeline.

``collective_rpc("name", ...)`` calls the public method of that name; a callable is called
as ``fn(worker, *args, **kwargs)``. The useful surface, as in vLLM:

* :meth:`get_model` — the ``torch.nn.Module`` (None for a runner without weights);
* :meth:`load_weights` — copy tensors into the model in place (RLHF weight sync), by
  checkpoint name (Hugging Face names; q/k/v and gate/up are packed as when loading);
* :meth:`sleep` / :meth:`wake_up` (by tags: worker/sleep_tags.py), :meth:`reset_requests`,
  :meth:`statistics`;
* :attr:`model_runner`, :attr:`model_config`, :attr:`device`, :attr:`rank` (0 on the worker
  thread; tensor parallel: ranks 1..N-1 run a Worker each in their own process,
  worker/tp_rank.py).

A ``worker_extension_cls`` (worker/extension.py) is mixed into a subclass of this class on
every rank: its methods are called by name the same way, with ``self`` the worker.

Tensor parallel: rank 0's Worker owns the :class:`~actorllm.worker.tp_group.TPGroup`.
The executor calls the ``*_group`` methods, which reach every rank; a failed step marks
the group broken, and :meth:`reset_requests` (the first job of a new core) replaces it.

The executor drives any :class:`ReplicaWorker`: this local :class:`Worker`, or a replica's
worker in a Ray actor driven from the thread (:class:`~actorllm.worker.remote.RemoteWorker`).

    worker = Worker(runner, has_queued_jobs=lambda: False)
    worker.collective_rpc("get_model")         # on the worker thread only
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

import msgspec

from actorllm.core.errors import InvalidRequestError
from actorllm.core.lora import LoRARequest
from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.worker.profiler import TorchProfiler
from actorllm.worker.runner import Runner, RunnerModelConfig
from actorllm.worker.step_pipeline import Post, StepPipeline
from actorllm.worker.worker_thread import Outcome

if TYPE_CHECKING:
    import torch

    from actorllm.core.scheduler.kv_connector import KVConnectorMetadata
    from actorllm.core.scheduler_output import SchedulerOutput
    from actorllm.worker.offload_store import OffloadStore
    from actorllm.worker.tp_group import TPGroup
    from actorllm.worker.weight_receiver import Receipt, WeightReceiver

Weights = Mapping[str, "torch.Tensor"] | Iterable[tuple[str, "torch.Tensor"]]


class Watched(Protocol):
    """What can fail between steps, outside the worker thread (the executor watches it):
    a tensor-parallel group (TPGroup), a remote worker's host (worker/ray_host.py).
    ``generation`` grows by one per replacement; ``broken`` says why the current one
    failed; ``notify(generation, why)`` is called, from any thread, when one fails."""

    generation: int
    broken: str | None
    notify: Callable[[int, str], None] | None


class Profiling(Protocol):
    """Whether a worker's torch profiler is running (worker/profiler.py)."""

    @property
    def running(self) -> bool: ...


class ReplicaWorker(Protocol):
    """A replica's worker as the executor drives it, on the replica's worker thread:
    :class:`Worker` (the runner on this thread) or
    :class:`~actorllm.worker.remote.RemoteWorker` (the runner in a Ray actor). Steps are
    posted in order; control calls run between steps and reach every rank of the replica."""

    @property
    def profiler(self) -> Profiling: ...

    def watched(self) -> Watched | None: ...

    def execute_step(
        self, so: SchedulerOutput, meta: KVConnectorMetadata | None, post: Post
    ) -> None: ...

    def reset_requests(self) -> None: ...

    def shutdown(self) -> None: ...

    def collective_rpc_group(
        self,
        method: str | Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> list[Any]: ...

    def sleep_group(self, level: int = 1, tags: Sequence[str] | None = None) -> None: ...

    def wake_up_group(self, tags: Sequence[str] | None = None) -> None: ...

    def start_profile(self) -> None: ...

    def stop_profile(self) -> str: ...

    def statistics(self) -> WorkerStatistics: ...


class WorkerStatistics(msgspec.Struct, frozen=True, kw_only=True):
    rank: int
    pending_steps: int  # launched on the device, result not posted yet
    max_pending_seen: int  # 2 means steps really overlapped
    profiling: bool
    runner: dict[str, Any]
    tensor_parallel: Any = None  # TPGroupStatistics (tensor parallel, rank 0)
    comm: Any = None  # CommStatistics: this rank's collectives (tensor parallel)
    remote: Any = None  # RemoteWorkerStatistics: rank 0 in a Ray actor (the driver's view)


class Worker:
    """Owns the runner, the launch pipeline, the KV offload store, the profiler and (tensor
    parallel, rank 0) the rank group. A ``worker_extension_cls`` is mixed into a subclass
    (worker/extension.py); the attributes below are what its methods may read on ``self``
    (and the names it may not redefine)."""

    rank: int  # this worker's tensor-parallel rank (0: the engine's worker thread)
    tp: TPGroup | None
    model_runner: Runner
    pipeline: StepPipeline
    offload_store: OffloadStore | None
    profiler: TorchProfiler
    device_name: str  # "cpu" or "cuda" (resolved): see :attr:`device`

    def __init__(
        self,
        runner: Runner,
        has_queued_jobs: Callable[[], bool],
        *,
        offload_store: OffloadStore | None = None,
        profiler_dir: str | None = None,
        cuda: bool = False,
        rank: int = 0,
        tp: TPGroup | None = None,
        device: str = "cpu",
    ) -> None:
        self.rank = rank
        self.device_name = device
        self.tp = tp  # rank 0 of a tensor-parallel group: ranks 1..N-1
        self.model_runner = runner  # ModelRunner, or a ScriptedModel in tests
        # Pipeline parallel: a step pending per stage (worker/step_pipeline.py).
        self.pipeline = StepPipeline(runner, has_queued_jobs, getattr(runner, "pp_size", 1))
        self.offload_store = offload_store
        self.profiler = TorchProfiler(profiler_dir, cuda=cuda)
        # This rank's side of a weight transfer from a trainer (worker/weight_receiver.py).
        self.weight_receiver: WeightReceiver | None = None

    @property
    def model_config(self) -> RunnerModelConfig:
        return self.model_runner.model_config

    @property
    def device(self) -> torch.device:
        """The torch device the model runs on (vLLM's ``Worker.device``)."""
        import torch

        return torch.device(self.device_name)

    def watched(self) -> Watched | None:
        """What the executor watches for failures between steps: the rank group."""
        return self.tp

    # -- steps (the executor's jobs) --------------------------------------------------------

    def execute_step(
        self, so: SchedulerOutput, meta: KVConnectorMetadata | None, post: Post
    ) -> None:
        """Launch ``so`` (after the KV connector's saves and loads); its outcome is posted."""
        store, runner = self.offload_store, self.model_runner

        def before() -> None:
            if meta is not None and store is not None:
                store.apply(runner, meta)  # saves first, then loads, before the forward

        tp = self.tp
        if tp is None:
            self.pipeline.run_step(so, post, before)
            return

        def post_tp(outcome: Outcome[ModelRunnerOutput]) -> None:
            if outcome.error is not None:  # the ranks may be anywhere in the step: replace them
                tp.mark_broken(f"a step failed on rank 0: {outcome.error!r}")
            post(outcome)

        self.pipeline.run_step(so, post_tp, before)

    def reset_requests(self) -> None:
        """A new core starts: forget every request (after the pending steps resolve);
        replace a broken tensor-parallel group."""
        self.pipeline.flush()
        self.model_runner.reset_requests()
        if self.tp is not None and self.tp.broken is not None:
            self.tp.restart()

    def shutdown(self) -> None:
        """The engine closes: stop ranks 1..N-1 (tensor parallel), then free the runner's
        KV cache and weights."""
        if self.tp is not None:
            self.pipeline.flush()
            self.tp.stop()
        if self.weight_receiver is not None:
            self.weight_receiver.close()  # a trainer still in the group sees it close
        self.model_runner.release()

    # -- control reaching every rank (the executor's calls) ---------------------------------

    def collective_rpc_group(
        self,
        method: str | Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> list[Any]:
        """:meth:`collective_rpc` on every rank; one result per rank, rank 0 first."""
        if self.tp is None:
            return [self.collective_rpc(method, args, kwargs)]
        self.pipeline.flush()
        seq = self.tp.start_rpc(method, args, kwargs)  # the ranks run it meanwhile
        try:
            mine = self.collective_rpc(method, args, kwargs)
        finally:
            others = self.tp.rpc_results(seq)  # waited for even when rank 0's call raised
        return [mine, *others]

    def sleep_group(self, level: int = 1, tags: Sequence[str] | None = None) -> None:
        """:meth:`sleep` on every rank, each alongside the others; returns once all slept."""
        self.collective_rpc_group("sleep", (level, None if tags is None else list(tags)))

    def wake_up_group(self, tags: Sequence[str] | None = None) -> None:
        """:meth:`wake_up` on every rank, each alongside the others; returns once all are
        awake: a rank still reloading its weights (level 2) would not read the next step's
        broadcast within the collective timeout, and its failure is the call's."""
        self.collective_rpc_group("wake_up", (None if tags is None else list(tags),))

    # -- control (between steps) ------------------------------------------------------------

    def collective_rpc(
        self,
        method: str | Callable[..., Any],
        args: tuple[Any, ...] = (),
        kwargs: Mapping[str, Any] | None = None,
    ) -> Any:
        """Run ``method`` on this worker between steps (see the module docstring)."""
        self.pipeline.flush()  # no step may be pending under a control call
        if callable(method):
            return method(self, *args, **dict(kwargs or {}))
        fn = getattr(self, method, None) if not method.startswith("_") else None
        if fn is None or not callable(fn):
            raise InvalidRequestError(f"the worker has no method {method!r}.", param="method")
        return fn(*args, **dict(kwargs or {}))

    def sleep(self, level: int = 1, tags: Sequence[str] | None = None) -> None:
        """Free memory while idle (``ModelRunner.sleep``: ``tags=["kv_cache"]`` the KV
        cache alone)."""
        self.pipeline.flush()
        self.model_runner.sleep(level, tags)

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """Restore what ``tags`` name ("weights", "kv_cache"; None: both)."""
        self.pipeline.flush()
        self.model_runner.wake_up(tags)

    def get_model(self) -> torch.nn.Module | None:
        return self.model_runner.model

    def compute_weight_checksums(self) -> dict[str, str]:
        """vLLM's: ``{"pp<stage>:pcp0:tp<rank>:<parameter>": SHA-256 of its bytes}`` for
        this rank's weights (worker/weight_checksums.py); the engine adds the replica's
        ``dp<index>:`` in front, as vLLM's keys."""
        from actorllm.distributed.pipe import rank_stage
        from actorllm.worker.weight_checksums import tensor_digests

        model = self._weights_model("compute_weight_checksums")
        runner = self.model_runner
        stage = rank_stage(getattr(runner, "pp_rank", 0), getattr(runner, "pp_size", 1))
        prefix = f"pp{stage}:pcp0:tp{getattr(runner, 'tp_rank', 0)}:"
        return {prefix + name: digest for name, digest in tensor_digests(model).items()}

    def reset_weights(self) -> None:
        """vLLM's: zero every weight (then an update must bring every checksum back)."""
        from actorllm.worker.weight_checksums import zero_weights

        zero_weights(self._weights_model("reset_weights"))

    def _weights_model(self, method: str) -> torch.nn.Module:
        self.pipeline.flush()
        model = self.get_model()
        if model is None:
            raise InvalidRequestError(
                f"{method}: this engine's runner has no weights (it is asleep at level 2, "
                "or it is not a model runner).",
                param="method",
            )
        return model

    def load_weights(self, weights: Weights) -> list[str]:
        """Copy ``weights`` (checkpoint names -> tensors) into the model in place; returns
        the parameter names written. Shapes must match; unknown names raise."""
        model = self.get_model()
        if model is None:
            raise InvalidRequestError(
                "this engine's runner has no weights to load (it is asleep at level 2, "
                "or it is not a model runner).",
                param="method",
            )
        from actorllm.models.loader import copy_weights

        self.pipeline.flush()
        items = weights.items() if isinstance(weights, Mapping) else weights
        return copy_weights(model, items)  # type: ignore[arg-type]  # a LlamaForCausalLM

    # -- weight transfer from a trainer (worker/weight_receiver.py; vLLM's names) -----------

    def init_weight_transfer_engine(
        self, init_info: dict[str, Any], backend: str | None = None, rank_base: int = 0
    ) -> None:
        """Join the trainer's transfer group (blocks until every rank joined). ``backend``
        and ``rank_base`` (this replica's first worker rank) come from the engine's
        ``weight_transfer_config``: ``LLM.init_weight_transfer_engine`` passes them."""
        if backend is None:
            raise RuntimeError(
                "Weight transfer not configured. "
                "Please set weight_transfer_config to enable weight transfer."
            )
        model = self._transfer_model()
        from actorllm.models.quant.linear import QUANT_LINEARS
        from actorllm.worker.weight_receiver import WeightReceiver

        quantized = next((m for m in model.modules() if isinstance(m, QUANT_LINEARS)), None)
        if quantized is not None:
            qc = getattr(model.config, "quantization_config", None) or {}
            method = qc.get("quant_method", type(quantized).__name__)
            raise NotImplementedError(
                f"weight transfer into a {method}-quantized model is not supported (its "
                "linears hold repacked quantized weights); serve the unquantized model"
            )
        receiver = self.weight_receiver
        if receiver is None or (receiver.backend, receiver.rank_base) != (backend, rank_base):
            if receiver is not None:
                receiver.shutdown()
            receiver = self.weight_receiver = WeightReceiver(backend, rank_base)
        receiver.init(init_info, self.rank)

    def shutdown_weight_transfer_engine(self) -> None:
        """Leave the transfer group; the engine keeps serving."""
        if self.weight_receiver is not None:
            self.weight_receiver.shutdown()

    def start_weight_update(self) -> None:
        self._receiver().start()

    def update_weights(self, update_info: dict[str, Any] | list[dict[str, Any]]) -> int:
        """Receive and stage one update's tensors, blocking this thread until they are in
        (the engine's own ``update_weights`` receives while steps run instead:
        :meth:`receive_weights_begin`); returns the count received."""
        self.receive_weights_begin(update_info)
        return self.receive_weights_end()

    def receive_weights_begin(
        self, update_info: dict[str, Any] | list[dict[str, Any]]
    ) -> Receipt | None:
        """Start receiving on a thread of this rank's own; rank 0 returns the receipt to
        wait on (the other ranks' would not pickle), then :meth:`receive_weights_end`."""
        receiver = self._receiver()
        if isinstance(update_info, list):  # vLLM's form: one per worker rank
            index = receiver.rank_base + self.rank
            if index >= len(update_info):
                raise ValueError(
                    f"update_info has {len(update_info)} entries; worker rank {index} has none"
                )
            update_info = update_info[index]
        receipt = receiver.begin(self._transfer_model(), update_info)
        return receipt if self.rank == 0 else None

    def receive_weights_end(self) -> int:
        return self._receiver().end()

    def finish_weight_update(self) -> list[str]:
        """Write the staged tensors into the model in place (between steps); returns the
        parameters written."""
        self.pipeline.flush()
        return self._receiver().finish(self._transfer_model())

    def _receiver(self) -> WeightReceiver:
        if self.weight_receiver is None:
            raise RuntimeError(
                "weight transfer not initialized: call init_weight_transfer_engine first"
            )
        return self.weight_receiver

    def _transfer_model(self) -> Any:
        model = self.get_model()
        if model is None:
            raise InvalidRequestError(
                "this engine's runner has no weights to update (it is asleep at level 2, "
                "or it is not a model runner).",
                param="method",
            )
        return model

    def add_lora(self, request: LoRARequest) -> bool:
        """Load a LoRA adapter into the host cache (``ValueError`` naming a bad one)."""
        self.pipeline.flush()
        return self.model_runner.add_lora(request)

    def remove_lora(self, name: str) -> bool:
        self.pipeline.flush()
        return self.model_runner.remove_lora(name)

    def pin_lora(self, name: str) -> bool:
        """Keep a loaded adapter resident until removed (vLLM's ``pin_lora``)."""
        self.pipeline.flush()
        return self.model_runner.pin_lora(name)

    def list_loras(self) -> list[str]:
        return self.model_runner.list_loras()

    def restore_lora_pins(self, requests: Sequence[LoRARequest]) -> None:
        """Pin these adapters, each read first if this worker does not hold it (a worker
        replaced by a restart holds none): what the engine pinned stays pinned. Pinning
        one already pinned does nothing. ``ValueError`` naming one that cannot be read."""
        self.pipeline.flush()
        runner = self.model_runner
        for request in requests:
            if request.lora_name not in runner.list_loras():
                runner.add_lora(request)
            runner.pin_lora(request.lora_name)

    def start_profile(self) -> None:
        self.profiler.start()

    def stop_profile(self) -> str:
        self.pipeline.flush()  # the trace covers the steps launched while it ran
        return str(self.profiler.stop())

    def statistics(self) -> WorkerStatistics:
        comm = self.model_runner.comm
        return WorkerStatistics(
            rank=self.rank,
            pending_steps=self.pipeline.pending,
            max_pending_seen=self.pipeline.max_pending_seen,
            profiling=self.profiler.running,
            runner=dict(self.model_runner.statistics()),
            tensor_parallel=self.tp.statistics() if self.tp is not None else None,
            comm=comm.statistics() if comm is not None else None,
        )


def _conforms(worker: Worker) -> ReplicaWorker:
    return worker  # mypy: Worker satisfies the ReplicaWorker protocol
