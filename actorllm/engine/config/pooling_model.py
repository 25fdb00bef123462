"""Which runner a model gets (vLLM's ``--runner`` / ``--convert``), and what a pooling model
offers: its tasks, its pooling, its sizes.

vLLM's rules, read off the checkpoint: a sentence-transformers layout (``modules.json``)
or an encoder architecture (``BertModel``, ``*ForSequenceClassification``, ``*Model``) is a
pooling model; a ``*ForCausalLM`` is a generative one unless ``--runner pooling`` or
``--convert embed|classify`` asks otherwise (a decoder as an embedder: last-token pooling,
normalized; as a classifier: its ``score`` head over the last token). A reward
architecture (``Qwen2ForRewardModel``, ``Qwen2ForProcessRewardModel``: vLLM's registry) is a
native pooling model whose one task is token_classify: its head's rewards per token (ALL
pooling) or at the step tags (STEP pooling).
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any, Literal

import msgspec

from actorllm.models.encoder_config import (
    COLBERT_ARCHITECTURES,
    encoder_pooler_spec,
    is_encoder_architecture,
    read_encoder_config,
)
from actorllm.models.pooler_spec import (
    REMOTE_CODE_REWARD_MODELS,
    REWARD_MODELS,
    PoolerConfigError,
    PoolerSpec,
    decoder_labels,
    decoder_pooler_spec,
    is_sentence_transformer,
    reward_pooler_spec,
)

RunnerType = Literal["generate", "pooling"]
# vLLM's ModelConfig.get_pooling_task: without --pooler-config's task, the first of these
# the model runs is the one /pooling and LLM.encode serve.
_TASK_PRIORITY = ("embed", "classify", "token_embed", "token_classify")
# A classifier's tasks: its label probabilities per prompt, or per token (its head on
# every token's hidden state).
CLASSIFY_TASKS = ("classify", "token_classify")
ConvertType = Literal["none", "embed", "classify"]

# vLLM's _SUFFIX_TO_DEFAULTS, the part that applies to text models (first match wins).
_SUFFIX_DEFAULTS: tuple[tuple[str, RunnerType, ConvertType], ...] = (
    ("ForCausalLM", "generate", "none"),
    ("LMHeadModel", "generate", "none"),
    ("ForTextEncoding", "pooling", "embed"),
    ("EmbeddingModel", "pooling", "embed"),
    ("ForSequenceClassification", "pooling", "classify"),
    ("Model", "pooling", "embed"),
)


class PoolingModel(msgspec.Struct, frozen=True, kw_only=True):
    """A pooling model, as the engine and the server see it."""

    architecture: str
    encoder: bool  # bidirectional, whole prompts: no chunking, no prefix cache
    convert: ConvertType  # "none": a native pooling model (an encoder)
    tasks: tuple[str, ...]  # supported pooling tasks ("embed", "classify", "token_embed")
    spec: PoolerSpec
    hidden_size: int
    num_labels: int = 0  # classifiers
    id2label: dict[int, str] = msgspec.field(default_factory=dict)
    # {input_type: the prefix an embedding of that kind gets} (Cohere's /v2/embed
    # input_type): config.json's task_instructions, else sentence-transformers' prompts
    task_instructions: dict[str, str] = msgspec.field(default_factory=dict)
    # --pooler-config's task (first in ``tasks``): the one task the front doors serve, as
    # vLLM's; None: vLLM's priority picks it (``default_task``)
    pooling_task: str | None = None

    @property
    def default_task(self) -> str:
        """The task a request without one gets, and the one task vLLM's front doors
        (``/pooling``, ``LLM.encode``) serve: ``--pooler-config``'s, else vLLM's priority
        (a ``*ForTokenClassification`` model: token_classify; then embed, classify,
        token_embed, token_classify)."""
        if self.pooling_task is not None:
            return self.pooling_task
        if "token_classify" in self.tasks and "ForTokenClassification" in self.architecture:
            return "token_classify"
        return next(t for t in _TASK_PRIORITY if t in self.tasks)

    @property
    def ordered_tasks(self) -> tuple[str, ...]:
        """``tasks`` with the default task first."""
        first = self.default_task
        return (first, *(t for t in self.tasks if t != first))

    @property
    def score_type(self) -> str | None:
        """How /score, /rerank and ``LLM.score`` score, by the pooling task (vLLM's
        SCORE_TYPE_MAP): "bi" (embed: the cosine of two embeddings), "cross" (classify,
        one label: the pair as one sequence), "late" (token_embed: ColBERT's MaxSim of the
        two sides' token embeddings); None: the model does not score."""
        task = self.default_task
        if task == "classify":
            return "cross" if self.num_labels == 1 else None
        return {"embed": "bi", "token_embed": "late"}.get(task)

    @property
    def is_cross_encoder(self) -> bool:
        """A classifier with one label scores (query, document) pairs (/score, /rerank)."""
        return "classify" in self.tasks and self.num_labels == 1

    @property
    def embedding_size(self) -> int:
        return self.hidden_size


def _arch(path: Path) -> str:
    """config.json's first architecture; "" without one (another format's loader decides)."""
    cfg = path / "config.json"
    if not cfg.is_file():
        return ""
    raw = json.loads(cfg.read_text())
    archs = raw.get("architectures") or []
    return str(archs[0]) if archs else ""


def resolve_runner(path: str | Path, runner: str, convert: str) -> tuple[RunnerType, ConvertType]:
    """vLLM's resolution of ``--runner auto`` and ``--convert auto`` for this checkpoint."""
    path = Path(path)
    arch = _arch(path)
    if arch in REMOTE_CODE_REWARD_MODELS:
        raise ValueError(
            f"{arch} is not supported: its decoder is the checkpoint's own (remote) code, "
            "which actorllm does not run."
        )
    if arch in REWARD_MODELS:
        return _reward_runner(arch, runner, convert)
    if runner == "auto":
        if (
            convert not in ("auto", "none")
            or is_sentence_transformer(path)
            or is_encoder_architecture(arch)
        ):
            runner = "pooling"
        else:
            runner = next((r for s, r, _ in _SUFFIX_DEFAULTS if arch.endswith(s)), "generate")
    if runner == "generate":
        if convert not in ("auto", "none"):
            raise ValueError(
                f"convert={convert!r} needs runner='pooling' (a converted model pools)."
            )
        if is_encoder_architecture(arch):
            raise ValueError(
                f"{arch} is an encoder-only model: it cannot generate text; serve it with "
                "runner='pooling'."
            )
        return "generate", "none"
    if convert == "auto":
        if is_encoder_architecture(arch):
            convert = "none"
        else:
            convert = next(
                (c for s, r, c in _SUFFIX_DEFAULTS if arch.endswith(s) and r == "pooling"),
                "embed",
            )
    if is_encoder_architecture(arch) and convert != "none":
        # An encoder already pools; vLLM's convert applies to decoders.
        native = "classify" if arch.endswith("ForSequenceClassification") else "embed"
        if convert != native:
            raise ValueError(f"{arch} is a native {native} model; convert={convert!r} does "
                             "not apply to it.")  # fmt: skip
        convert = "none"
    return "pooling", convert  # type: ignore[return-value]


def _reward_runner(arch: str, runner: str, convert: str) -> tuple[RunnerType, ConvertType]:
    """A reward model pools, as it is (vLLM's registry lists it as a pooling model)."""
    if runner == "generate":
        raise ValueError(
            f"{arch} is a reward model: it cannot generate text; serve it with runner='pooling'."
        )
    if convert not in ("auto", "none"):
        raise ValueError(f"{arch} is a native reward model; convert={convert!r} does not "
                         "apply to it.")  # fmt: skip
    return "pooling", "none"


@cache
def _pooling_model(path: Path, convert: ConvertType, overrides_json: str) -> PoolingModel:
    pm = _read_pooling_model(path, convert, json.loads(overrides_json))
    _check_token_pooling(pm)
    task = json.loads(overrides_json).get("task")
    if task is None:
        return pm
    if task not in pm.tasks:
        raise PoolerConfigError(
            "task", f"task {task!r} is not one this model runs (it runs: {', '.join(pm.tasks)})"
        )
    tasks = (task, *(t for t in pm.tasks if t != task))
    return msgspec.structs.replace(pm, tasks=tasks, pooling_task=task)


def _check_token_pooling(pm: PoolingModel) -> None:
    """STEP pooling where it is built (the reward models, whose head's logits it picks
    from), and its settings only with it: refused by name, never ignored."""
    spec = pm.spec
    if spec.tok_pooling_type == "STEP" and pm.architecture not in REWARD_MODELS:
        raise PoolerConfigError(
            "tok_pooling_type", f"STEP token pooling is built for the reward models "
            f"({', '.join(REWARD_MODELS)}) only, not for {pm.architecture or 'this model'}"
        )  # fmt: skip
    if spec.tok_pooling_type != "STEP":
        for key in ("step_tag_id", "returned_token_ids"):
            if getattr(spec, key) is not None:
                raise PoolerConfigError(
                    key, f"{key} applies to STEP token pooling; this model's is "
                    f"{spec.tok_pooling_type} (set tok_pooling_type 'STEP')"
                )  # fmt: skip


def _read_pooling_model(
    path: Path, convert: ConvertType, overrides: dict[str, Any]
) -> PoolingModel:
    arch = _arch(path)
    if arch in REWARD_MODELS:
        return _reward_model(path, arch, overrides)
    if is_encoder_architecture(arch):
        cfg = read_encoder_config(path)
        spec = encoder_pooler_spec(path, cfg, overrides)
        tasks: tuple[str, ...] = CLASSIFY_TASKS if cfg.classifier else ("embed", "token_embed")
        if arch in COLBERT_ARCHITECTURES:
            tasks = ("token_embed",)  # vLLM's ColBERTModel: late interaction only
        return PoolingModel(
            architecture=arch,
            encoder=True,
            convert="none",
            tasks=tasks,
            spec=spec,
            hidden_size=cfg.output_size,
            num_labels=cfg.num_labels if cfg.classifier else 0,
            id2label=cfg.id2label,
            task_instructions=_task_instructions(path),
        )
    raw = json.loads((path / "config.json").read_text())
    num_labels, id2label = 0, dict[int, str]()
    if convert == "classify":
        num_labels, id2label, _ = decoder_labels(path)
    spec = decoder_pooler_spec(path, convert, overrides)
    return PoolingModel(
        architecture=arch,
        encoder=False,
        convert=convert,
        tasks=CLASSIFY_TASKS if convert == "classify" else ("embed", "token_embed"),
        spec=spec,
        hidden_size=int(raw["hidden_size"]),
        num_labels=num_labels,
        id2label=id2label,
        task_instructions=_task_instructions(path),
    )


def _reward_model(path: Path, arch: str, overrides: dict[str, Any]) -> PoolingModel:
    """A reward model: token_classify only (so its default task, as vLLM's pooling task
    for it), over its head's ``num_labels`` columns (fixed by the architecture)."""
    reward = REWARD_MODELS[arch]
    spec = reward_pooler_spec(path, reward, overrides)
    ids = spec.returned_token_ids
    if ids is not None and not all(0 <= i < reward.num_labels for i in ids):
        raise PoolerConfigError(
            "returned_token_ids", f"returned_token_ids must index {arch}'s "
            f"{reward.num_labels} logits (0 to {reward.num_labels - 1}), got {ids}"
        )  # fmt: skip
    raw = json.loads((path / "config.json").read_text())
    return PoolingModel(
        architecture=arch,
        encoder=False,
        convert="none",
        tasks=("token_classify",),
        spec=spec,
        hidden_size=int(raw["hidden_size"]),
        num_labels=reward.num_labels,
    )


def _task_instructions(path: Path) -> dict[str, str]:
    """vLLM's sources, in its order: config.json's ``task_instructions``, else
    ``config_sentence_transformers.json``'s ``prompts`` (string values only)."""
    for name, key in (("config.json", "task_instructions"),
                      ("config_sentence_transformers.json", "prompts")):  # fmt: skip
        try:
            found = json.loads((path / name).read_text()).get(key)
        except (OSError, ValueError, AttributeError):
            continue
        if isinstance(found, dict) and found:
            return {k: v for k, v in found.items() if isinstance(v, str)}
    return {}


def pooling_model(
    path: str | Path, convert: ConvertType, overrides: dict[str, Any] | None
) -> PoolingModel:
    """What the pooling model at ``path`` offers (read once per arguments)."""
    return _pooling_model(Path(path), convert, json.dumps(overrides or {}, sort_keys=True))
