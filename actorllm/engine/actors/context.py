"""``EngineContext``: the little the engine's actors share, kept beside them so it survives
restarts.

Actors are rebuilt from their ``ChildSpec`` factory at every restart; what must outlive one
incarnation lives here, each piece with one owner. What only one actor needs (the worker,
the tokenizer, the input processing) is handed to that actor alone through its ``ChildSpec``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from actorllm.engine.actors.messages import EngineRefs
from actorllm.engine.config.engine_config import EngineConfig
from actorllm.engine.config.pooling_model import PoolingModel
from actorllm.engine.recovery.admission import Admission
from actorllm.engine.recovery.blame import Blame
from actorllm.engine.recovery.ledger import RequestLedger
from actorllm.engine.recovery.lora_record import LoRARecord


@dataclass(frozen=True)
class ModelInfo:
    """What the engine needs to know about the loaded model."""

    vocab_size: int
    max_model_len: int
    eos_token_ids: list[int]
    num_blocks: int  # KV blocks, including the null block
    # Each KV cache group's window (None: full attention): one group unless the model mixes
    # attention types (Gemma 2/3). The scheduler hands blocks behind a window back.
    kv_group_windows: tuple[int | None, ...] = (None,)
    # A pooling model (its tasks, pooling and sizes); None: a generative model.
    pooling: PoolingModel | None = None
    # With enable_prompt_embeds: (hidden size, torch dtype) of an embedding prompt's rows.
    prompt_embeds: tuple[int, Any] | None = None

    @property
    def sliding_window(self) -> int | None:
        """The window every layer shares (Mistral-style; one group), else None."""
        return self.kv_group_windows[0] if len(self.kv_group_windows) == 1 else None


@dataclass(frozen=True, eq=False)
class EngineContext:
    config: EngineConfig
    model: ModelInfo
    # Open requests, the recovery record and the core epoch. Writers: AsyncEngine opens,
    # input_processor records processing, output_processor emits and closes, Admission
    # starts epochs.
    ledger: RequestLedger
    refs: EngineRefs  # set by AsyncEngine as the actors start
    # Precise blame, per scope. Written through its methods by the dead-letter policy
    # (crashes) and by each actor for its own scope (clearing).
    blame: Blame
    # The scheduler's persistent state: core, steps in flight, probation, sleep level, KV
    # connector switch. Owner: the scheduler actor; others ask it (GetStats, IsSleeping...)
    # and read only what it publishes: ``admission.running``, an immutable tuple of the
    # running child ids, replaced after each of its messages (the waiting-queue bound).
    admission: Admission
    # The LoRA adapters added and pinned (one record, shared by the replicas). Writer:
    # AsyncEngine's LoRAAdapters; each executor incarnation re-pins the pinned ones.
    loras: LoRARecord = field(default_factory=LoRARecord)
