"""Pooling heads, the spec: how a pooling model turns a sequence's hidden states into its
result (no torch here: the engine reads it; models/pooler.py applies it).

:class:`PoolerSpec` is read from the checkpoint (sentence-transformers' ``modules.json``,
``1_Pooling/config.json``, ``Normalize``, ``sentence_bert_config.json``) with vLLM's
``--pooler-config`` on top; :func:`pool_sequences` applies it to one step's rows.

Sequence pooling: ``MEAN`` (average of the prompt's rows), ``CLS`` (the first row),
``LAST`` (the last row). Then, for ``embed``, L2-normalization when the model says so
(a ``Normalize`` module; a decoder converted with ``--convert embed``) and the request's
``use_activation`` is not False; for ``classify``, the classifier and its activation
(softmax over the labels, sigmoid for one label or multi-label checkpoints).

Token pooling (the ``token_*`` tasks): ``ALL`` (a row per prompt token) or ``STEP`` (vLLM's
process-reward pooling: only the rows at the prompt's ``step_tag_id`` tokens, only the
``returned_token_ids`` columns of the head's logits). The reward models (:data:`REWARD_MODELS`)
are the decoders whose own head makes those logits.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

import msgspec

PoolingType = Literal["MEAN", "CLS", "LAST"]
POOLING_TYPES: tuple[str, ...] = ("MEAN", "CLS", "LAST")
TokenPoolingType = Literal["ALL", "STEP"]
TOKEN_POOLING_TYPES: tuple[str, ...] = ("ALL", "STEP")
# How a classifier's logits become its result: softmax over the labels; sigmoid (one
# label, multi-label checkpoints); "by_shape": sigmoid when one column is left, else
# softmax (vLLM's token poolers decide per result: STEP may keep one column); "identity"
# (problem_type "regression").
ClassifyActivation = Literal["softmax", "sigmoid", "by_shape", "identity"]

# vLLM 0.32's PoolerConfig keys this engine honours; any other is refused by name.
POOLER_CONFIG_KEYS = frozenset(
    {"pooling_type", "seq_pooling_type", "tok_pooling_type", "use_activation", "dimensions",
     "logit_mean", "logit_sigma", "task", "step_tag_id", "returned_token_ids",
     "enable_chunked_processing", "max_embed_len"}
)  # fmt: skip


class RewardModel(msgspec.Struct, frozen=True, kw_only=True):
    """A reward architecture: a decoder whose head (``score.0`` Linear h->h, ReLU,
    ``score.2`` Linear h->num_labels) scores every token (vLLM's ``qwen2_rm.py``)."""

    body: str  # the causal architecture with the same decoder (its weights, its loader)
    num_labels: int  # fixed by the architecture, whatever config.json says (vLLM's)
    tok_pooling_type: TokenPoolingType  # the architecture's default token pooling
    # vLLM's per-architecture PoolerConfig defaults (its models/config.py)
    step_tag_id: int | None = None
    use_activation: bool | None = None


REWARD_MODELS: dict[str, RewardModel] = {
    "Qwen2ForRewardModel": RewardModel(
        body="Qwen2ForCausalLM", num_labels=1, tok_pooling_type="ALL", use_activation=False
    ),
    "Qwen2ForProcessRewardModel": RewardModel(
        body="Qwen2ForCausalLM", num_labels=2, tok_pooling_type="STEP", step_tag_id=151651
    ),
}
# vLLM's reward architectures whose decoder needs the checkpoint's own (remote) code
REMOTE_CODE_REWARD_MODELS = frozenset({"InternLM2ForRewardModel"})


class PoolerConfigError(ValueError):
    def __init__(self, key: str, message: str) -> None:
        self.key = key
        super().__init__(message)


class PoolerSpec(msgspec.Struct, frozen=True, kw_only=True):
    pooling_type: PoolingType
    normalize: bool  # embed: L2-normalize (when the request's use_activation allows)
    classify_activation: ClassifyActivation = "softmax"  # classify, token_classify
    default_use_activation: bool = True  # --pooler-config use_activation
    dimensions: int | None = None  # --pooler-config dimensions: the default matryoshka cut
    logit_mean: float | None = None
    logit_sigma: float | None = None
    max_seq_length: int | None = None  # sentence_bert_config.json
    is_matryoshka: bool = False
    matryoshka_dimensions: list[int] | None = None
    tok_pooling_type: TokenPoolingType = "ALL"  # token_* tasks
    # STEP pooling's defaults for a request that leaves them unset (--pooler-config)
    step_tag_id: int | None = None
    returned_token_ids: list[int] | None = None
    # Long embedding inputs (vLLM's): split into max_model_len chunks whose embeddings are
    # averaged, weighted by their lengths (entrypoints/openai/embed_chunks.py)
    enable_chunked_processing: bool = False
    # The longest embedding input taken (tokens); None: max_model_len, or no limit with
    # chunked processing
    max_embed_len: int | None = None


def _st_modules(path: Path) -> list[dict[str, Any]]:
    """sentence-transformers' module list (``modules.json``); [] when there is none."""
    f = path / "modules.json"
    return json.loads(f.read_text()) if f.is_file() else []


def is_sentence_transformer(path: str | Path) -> bool:
    return bool(_st_modules(Path(path)))


def read_pooler_spec(
    path: str | Path,
    *,
    default_type: PoolingType,
    default_normalize: bool,
    num_labels: int = 0,
    problem_type: str | None = None,
    overrides: dict[str, Any] | None = None,
) -> PoolerSpec:
    """The checkpoint's pooling, with ``overrides`` (vLLM's ``--pooler-config``) on top."""
    path = Path(path)
    pooling_type: str = default_type
    normalize = default_normalize
    modules = _st_modules(path)
    max_seq: int | None = None
    if modules:
        kinds = [m.get("type", "").rsplit(".", 1)[-1] for m in modules]
        normalize = "Normalize" in kinds
        for m in modules:
            if m.get("type", "").endswith(".Pooling"):
                cfg = json.loads((path / m.get("path", "") / "config.json").read_text())
                pooling_type = _st_pooling_type(cfg)
        st = path / "sentence_bert_config.json"
        if st.is_file():
            max_seq = json.loads(st.read_text()).get("max_seq_length")
    raw = json.loads((path / "config.json").read_text())
    mds = raw.get("matryoshka_dimensions")
    spec = PoolerSpec(
        pooling_type=pooling_type,  # type: ignore[arg-type]
        normalize=normalize,
        classify_activation="sigmoid"
        if num_labels == 1 or problem_type == "multi_label_classification"
        else "softmax",
        max_seq_length=int(max_seq) if max_seq else None,
        is_matryoshka=bool(raw.get("is_matryoshka") or mds),
        matryoshka_dimensions=[int(d) for d in mds] if mds else None,
    )
    return apply_overrides(spec, overrides or {})


def _st_pooling_type(cfg: dict[str, Any]) -> str:
    mode = cfg.get("pooling_mode")
    if mode:
        table = {"mean": "MEAN", "cls": "CLS", "lasttoken": "LAST"}
        if mode not in table:
            raise PoolerConfigError(
                "pooling_mode",
                f"sentence-transformers pooling_mode {mode!r} is not supported "
                "(mean, cls, lasttoken)",
            )
        return table[mode]
    on = [k for k, v in cfg.items() if k.startswith("pooling_mode_") and v]
    table = {
        "pooling_mode_mean_tokens": "MEAN",
        "pooling_mode_cls_token": "CLS",
        "pooling_mode_lasttoken": "LAST",
    }
    if len(on) != 1 or on[0] not in table:
        raise PoolerConfigError(
            "pooling_mode", f"sentence-transformers pooling {on} is not supported (one of "
            "mean_tokens, cls_token, lasttoken)"
        )  # fmt: skip
    return table[on[0]]


def apply_overrides(spec: PoolerSpec, overrides: dict[str, Any]) -> PoolerSpec:
    """vLLM 0.32's ``--pooler-config`` keys on top of the checkpoint's pooling."""
    if "normalize" in overrides:  # vLLM 0.32's own refusal
        raise PoolerConfigError(
            "normalize", "Parameter `normalize` was removed; use `use_activation` instead."
        )
    unknown = sorted(set(overrides) - POOLER_CONFIG_KEYS)
    if unknown:
        raise PoolerConfigError(
            unknown[0], f"pooler_config key {unknown[0]!r} is not supported "
            f"(supported: {', '.join(sorted(POOLER_CONFIG_KEYS))})"
        )  # fmt: skip
    changes = _pooling_types(overrides)
    if overrides.get("use_activation") is not None:
        changes["default_use_activation"] = bool(overrides["use_activation"])
    for k in ("dimensions", "logit_mean", "logit_sigma"):
        if overrides.get(k) is not None:
            changes[k] = overrides[k]
    if changes.get("logit_sigma") == 0:
        raise PoolerConfigError("logit_sigma", "logit_sigma cannot be 0 (division by zero)")
    changes |= _step_defaults(overrides) | _long_inputs(overrides)
    return msgspec.structs.replace(spec, **changes)


def _long_inputs(overrides: dict[str, Any]) -> dict[str, Any]:
    """``enable_chunked_processing`` and ``max_embed_len`` (a positive token count)."""
    changes: dict[str, Any] = {}
    if overrides.get("enable_chunked_processing") is not None:
        changes["enable_chunked_processing"] = bool(overrides["enable_chunked_processing"])
    limit = overrides.get("max_embed_len")
    if limit is not None:
        if isinstance(limit, bool) or not isinstance(limit, int) or limit < 1:
            raise PoolerConfigError("max_embed_len", "max_embed_len must be a positive integer")
        changes["max_embed_len"] = limit
    return changes


def _pooling_types(overrides: dict[str, Any]) -> dict[str, Any]:
    """vLLM's ``pooling_type`` (sequence or token, by its value) beside the explicit
    ``seq_pooling_type`` / ``tok_pooling_type``, refused in its words when both are set."""
    changes: dict[str, Any] = {}
    ptype = overrides.get("pooling_type")
    for explicit in ("seq_pooling_type", "tok_pooling_type"):
        if ptype is not None and overrides.get(explicit) is not None:
            raise PoolerConfigError(
                "pooling_type", f"Cannot set both `pooling_type` and `{explicit}`"
            )
    seq = overrides.get("seq_pooling_type")
    tok = overrides.get("tok_pooling_type")
    if ptype is not None:
        if ptype in POOLING_TYPES:
            seq = ptype
        elif ptype in TOKEN_POOLING_TYPES:
            tok = ptype
        else:
            raise PoolerConfigError(
                "pooling_type",
                f"pooling_type {ptype!r} is not supported (CLS, LAST, MEAN; ALL, STEP)",
            )
    if seq is not None:
        if seq not in POOLING_TYPES:
            raise PoolerConfigError(
                "seq_pooling_type", f"seq_pooling_type {seq!r} is not supported (CLS, LAST, MEAN)"
            )
        changes["pooling_type"] = seq
    if tok is not None:
        if tok not in TOKEN_POOLING_TYPES:
            raise PoolerConfigError(
                "tok_pooling_type", f"tok_pooling_type {tok!r} is not supported (ALL, STEP)"
            )
        changes["tok_pooling_type"] = tok
    return changes


def _step_defaults(overrides: dict[str, Any]) -> dict[str, Any]:
    """``step_tag_id`` (an int) and ``returned_token_ids`` (a list of ints), type-checked."""
    changes: dict[str, Any] = {}
    tag = overrides.get("step_tag_id")
    if tag is not None:
        if not isinstance(tag, int) or isinstance(tag, bool):
            raise PoolerConfigError("step_tag_id", f"step_tag_id must be an integer, got {tag!r}")
        changes["step_tag_id"] = tag
    ids = overrides.get("returned_token_ids")
    if ids is not None:
        if not isinstance(ids, list) or not all(
            isinstance(i, int) and not isinstance(i, bool) for i in ids
        ):
            raise PoolerConfigError(
                "returned_token_ids", f"returned_token_ids must be a list of integers, got {ids!r}"
            )
        changes["returned_token_ids"] = list(ids)
    return changes


def reward_pooler_spec(
    path: str | Path, reward: RewardModel, overrides: dict[str, Any] | None
) -> PoolerSpec:
    """A reward model's pooling: its architecture's token pooling and vLLM's defaults for
    it, ``--pooler-config`` on top. Its activation is vLLM's for a token classifier read
    from config.json's ``problem_type``: none for "regression", sigmoid for
    "multi_label_classification", else by the result's shape."""
    problem_type = json.loads((Path(path) / "config.json").read_text()).get("problem_type")
    activation: ClassifyActivation = {"regression": "identity",
                                      "multi_label_classification": "sigmoid"}.get(
        problem_type or "", "by_shape")  # type: ignore[assignment]  # fmt: skip
    spec = PoolerSpec(
        pooling_type="LAST",
        normalize=False,
        classify_activation=activation,
        tok_pooling_type=reward.tok_pooling_type,
    )
    spec = apply_overrides(spec, overrides or {})
    changes: dict[str, Any] = {}
    if spec.tok_pooling_type == "STEP" and spec.step_tag_id is None:
        changes["step_tag_id"] = reward.step_tag_id
    if reward.use_activation is not None and (overrides or {}).get("use_activation") is None:
        changes["default_use_activation"] = reward.use_activation
    return msgspec.structs.replace(spec, **changes)


def causal_architecture(architecture: str) -> str:
    """The generative class a decoder pooling checkpoint builds on: ``Qwen3ForSequence-
    Classification`` -> ``Qwen3ForCausalLM`` (the same body; the score head is the
    pooler's); a reward model's, its table's ``body``."""
    if architecture in REWARD_MODELS:
        return REWARD_MODELS[architecture].body
    return architecture.replace("ForSequenceClassification", "ForCausalLM")


def decoder_labels(path: str | Path) -> tuple[int, dict[int, str], str | None]:
    """A decoder classifier's (num_labels, id2label, problem_type) from config.json."""
    raw = json.loads((Path(path) / "config.json").read_text())
    id2label = {int(k): str(v) for k, v in (raw.get("id2label") or {}).items()}
    num_labels = int(raw.get("num_labels") or len(id2label) or 2)
    return num_labels, id2label, raw.get("problem_type")


def decoder_pooler_spec(
    path: str | Path, convert: str, overrides: dict[str, Any] | None
) -> PoolerSpec:
    """A decoder served as a pooling model (``--convert embed|classify``): last-token
    pooling, normalized embeddings (vLLM's defaults), unless its sentence-transformers
    files or ``--pooler-config`` say otherwise."""
    num_labels, _, problem_type = decoder_labels(path) if convert == "classify" else (0, {}, None)
    return read_pooler_spec(
        path,
        default_type="LAST",
        default_normalize=True,
        num_labels=num_labels,
        problem_type=problem_type,
        overrides=overrides,
    )
