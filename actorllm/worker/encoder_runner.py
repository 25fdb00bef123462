"""``EncoderRunner``: the runner of an encoder-only pooling model (BERT, RoBERTa, XLM-R).

An encoder sees each request's whole prompt at once (bidirectional attention), so the
engine schedules encoder requests unchunked and without prefix caching (engine config),
and this runner keeps no KV cache: the scheduler's block accounting still bounds a step,
and the blocks are freed as soon as the pooled result is back. Each step runs one forward
over its sequences and returns their pooled results (``ModelRunnerOutput.pooled``).

    runner = EncoderRunner("/models/all-MiniLM-L6-v2", dtype="float32")
    runner.load_model(); runner.initialize_kv_cache(1024)
    out = runner.launch(scheduler_output).result()   # out.pooled[req_id]
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec
import torch

from actorllm.core.lora import LoRARequest
from actorllm.core.model_runner_output import ModelRunnerOutput
from actorllm.core.pooling_params import PoolingParams
from actorllm.core.scheduler_output import SchedulerOutput
from actorllm.kernels.cpu_features import native_bf16
from actorllm.models.bert import EncoderModel, load_encoder
from actorllm.models.encoder_config import EncoderConfig, encoder_pooler_spec, read_encoder_config
from actorllm.models.loader import DTYPES
from actorllm.models.onednn_linear import prepack_linears
from actorllm.worker.pooling_head import PoolingHead
from actorllm.worker.runner import FinishedStep, Runner
from actorllm.worker.sleep_tags import SLEEP_TAGS, WEIGHTS, sleep_parts, to_wake
from actorllm.worker.step_inputs import SchedulerProtocolError

if TYPE_CHECKING:
    from actorllm.distributed.comm import GlooComm


def encoder_dtype(dtype: str, device: str | torch.device) -> torch.dtype:
    """The dtype an encoder runs in: ``dtype`` by name, or for "auto" bfloat16 where it is
    fast, float32 on a CPU without native bf16 dot products (the decoders' rule,
    ``models/loader.resolve_dtype``; vLLM's "auto" picks float16 for pooling models, which
    a CPU without AMX-FP16 runs slower than either)."""
    if dtype == "auto":
        fast = torch.device(device).type != "cpu" or native_bf16()
        return torch.bfloat16 if fast else torch.float32
    if dtype in DTYPES:
        return DTYPES[dtype]
    raise ValueError(f"dtype {dtype!r} is not supported (auto, {', '.join(DTYPES)})")


class EncoderRunner:
    """Runs an encoder-only model; worker thread only. Satisfies :class:`Runner`."""

    def __init__(
        self,
        model_path: str | Path,
        *,
        dtype: str = "auto",
        device: str | torch.device = "cpu",
        max_model_len: int | None = None,
        pooler_config: dict[str, Any] | None = None,
        block_size: int = 16,
    ) -> None:
        self.model_path = Path(model_path)
        self.device = torch.device(device)
        cfg = read_encoder_config(self.model_path)
        self.spec = encoder_pooler_spec(self.model_path, cfg, pooler_config)
        limit = cfg.max_positions
        if self.spec.max_seq_length:
            limit = min(limit, self.spec.max_seq_length)
        if max_model_len is not None and not 0 < max_model_len <= cfg.max_positions:
            raise ValueError(
                f"max_model_len must be in [1, {cfg.max_positions}] for this model, got "
                f"{max_model_len}"
            )
        self.model_config: EncoderConfig = msgspec.structs.replace(
            cfg, max_model_len=max_model_len or limit
        )
        self.dtype = encoder_dtype(dtype, self.device)
        self.block_size = block_size
        self._model: EncoderModel | None = None
        self.head = PoolingHead(self.spec, None)
        # {req_id: (prompt token ids, pooling params)} of requests scheduled and not done
        self._reqs: dict[str, tuple[list[int], PoolingParams]] = {}
        self.num_blocks = 0
        self.sleep_level = 0
        self.num_steps = 0

    # -- the Runner protocol's "none" answers -------------------------------------------

    @property
    def model(self) -> torch.nn.Module | None:
        return self._model

    @property
    def kv_caches(self) -> None:
        return None  # an encoder keeps no KV

    @property
    def comm(self) -> GlooComm | None:
        return None

    @property
    def kv_group_windows(self) -> tuple[int | None, ...]:
        return (None,)

    def kv_cache_bytes_per_block(self) -> int:
        # Nothing is stored; a nominal size (one fp32 hidden row per slot) makes the
        # block budget bound a step's tokens like activations would.
        return self.block_size * self.model_config.hidden_size * 4

    def profile_num_blocks(self, gpu_memory_utilization: float) -> None:
        return None

    def initialize_kv_cache(self, num_blocks: int) -> None:
        self.num_blocks = num_blocks

    # -- lifecycle --------------------------------------------------------------------

    def load_model(self) -> None:
        self._model = load_encoder(self.model_path, self.model_config, self.dtype, self.device)
        model = self._model
        if self.device.type == "cpu":
            prepack_linears(model)  # oneDNN matmuls (models/onednn_linear.py)
        self.head = PoolingHead(
            self.spec,
            model.classify if model.classifier else None,
            token_classifier=model.classifier,  # its head alone, on every token (vLLM's)
        )

    def reset_requests(self) -> None:
        self._reqs.clear()
        self.head.reset()

    def sleep(self, level: int, tags: Sequence[str] | None = None) -> None:
        """An encoder keeps no KV cache: ``tags=["kv_cache"]`` frees nothing but the
        requests' state (and leaves the runner awake)."""
        if level not in (1, 2):
            raise ValueError(f"sleep level must be 1 or 2, got {level}")
        self.reset_requests()
        if WEIGHTS not in sleep_parts(tags):
            return
        if level == 2:
            self._model = None
        self.sleep_level = level

    def wake_up(self, tags: Sequence[str] | None = None) -> None:
        """An encoder keeps no KV cache: waking "kv_cache" alone changes nothing, the
        weights (reloaded at level 2) are what ``tags`` must name (None: everything)."""
        if self.sleep_level and WEIGHTS in to_wake(frozenset(SLEEP_TAGS), tags):
            if self.sleep_level == 2:
                self.load_model()
            self.sleep_level = 0

    def release(self) -> None:
        self._model = None
        self._reqs.clear()

    def add_lora(self, request: LoRARequest) -> bool:
        """Encoder models take no adapters (the engine refuses enable_lora for them)."""
        raise ValueError(
            f"LoRA adapter {request.lora_name!r}: adapters are not built for encoder models"
        )

    def remove_lora(self, name: str) -> bool:
        return False  # none is ever loaded

    def pin_lora(self, name: str) -> bool:
        raise ValueError(f"Pinning failed: LoRA adapter {name!r} is not loaded.")

    def list_loras(self) -> list[str]:
        return []

    def statistics(self) -> dict[str, object]:
        return {"steps": self.num_steps, "requests": len(self._reqs)}

    # -- the step ---------------------------------------------------------------------

    def launch(self, so: SchedulerOutput) -> FinishedStep:
        return FinishedStep(self.execute(so))

    def execute(self, so: SchedulerOutput) -> ModelRunnerOutput:
        t0 = time.perf_counter()
        for rid in (*so.finished_req_ids, *so.preempted_req_ids):
            self._reqs.pop(rid, None)
        for new in so.scheduled_new_reqs:
            pooling = new.sampling_params.pooling_params
            if pooling is None:
                raise SchedulerProtocolError(
                    f"request {new.req_id} is not a pooling request: an encoder model only pools"
                )
            self._reqs[new.req_id] = (new.prompt_token_ids, pooling)
        req_ids = list(so.num_scheduled_tokens)
        if not req_ids:
            return ModelRunnerOutput(step_id=so.step_id, req_ids=[], sampled_token_ids=[])
        model = self._model
        if model is None or self.sleep_level:
            raise RuntimeError("execute() before load_model() or while asleep")
        ids: list[int] = []
        types: list[int] = []
        lens: list[int] = []
        params: list[PoolingParams] = []
        for rid in req_ids:
            found = self._reqs.get(rid)
            if found is None:
                raise SchedulerProtocolError(f"request {rid} is unknown to the encoder runner")
            prompt, p = found
            if so.num_scheduled_tokens[rid] != len(prompt):
                raise SchedulerProtocolError(
                    f"request {rid}: an encoder runs whole prompts ({len(prompt)} tokens), "
                    f"got a chunk of {so.num_scheduled_tokens[rid]}"
                )
            ids += prompt
            start = p.token_type_start
            types += (
                [0] * len(prompt)
                if start is None
                else [int(i >= start) for i in range(len(prompt))]
            )
            lens.append(len(prompt))
            params.append(p)
        starts = [0]
        for n in lens[:-1]:
            starts.append(starts[-1] + n)
        with torch.inference_mode():
            hidden = model(
                torch.tensor(ids, device=self.device),
                torch.tensor(types, device=self.device),
                lens,
            )  # [T, H]
            pooled = self.head.pool(hidden, req_ids, starts, lens, params)
        self.num_steps += 1
        return ModelRunnerOutput(
            step_id=so.step_id,
            req_ids=req_ids,
            sampled_token_ids=[[] for _ in req_ids],
            pooled=pooled,
            execute_time_s=time.perf_counter() - t0,
        )


def _conforms(runner: EncoderRunner) -> Runner:
    return runner  # mypy: EncoderRunner satisfies the Runner protocol
