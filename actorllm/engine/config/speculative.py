"""vLLM's ``speculative_config`` (``LLM(..., speculative_config={...})``,
``--speculative-config JSON``), read into one typed :class:`SpeculativeConfig`.

Every key of vLLM 0.32's ``SpeculativeConfig`` is honoured or refused with an error that
names it; none is dropped. Built:

* ``method: "ngram"``: prompt lookup on the host, ``prompt_lookup_min`` /
  ``prompt_lookup_max`` (vLLM's defaults: both 5 when neither is given, the other one's
  value when one is);
* ``method: "suffix"``: suffix decoding on the host (``suffix_decoding_max_tree_depth``,
  ``_max_cached_requests``, ``_max_spec_factor``, ``_min_token_prob``, vLLM's defaults
  and checks; ``num_speculative_tokens`` defaults to the tree depth, as vLLM's);
* ``method: "draft_model"``: ``model``, a smaller model of the same vocabulary (a
  ``model`` without a method means it, as in vLLM);
* ``method: "eagle"`` / ``"eagle3"``: ``model``, an EAGLE / EAGLE-3 head (also guessed
  from a draft model's name, as vLLM guesses).

Refused by name: every other method (MTP, medusa, ...), and every tuning key at a value
other than vLLM's default (``draft_sample_method: "probabilistic"``,
``rejection_sample_method: "synthetic"``, ...).

    >>> c = parse_speculative_config({"method": "ngram", "num_speculative_tokens": 4})
    >>> c.num_speculative_tokens, c.prompt_lookup_min, c.prompt_lookup_max
    (4, 5, 5)
    >>> parse_speculative_config({"method": "suffix"}).num_speculative_tokens
    24
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Literal, cast

import msgspec

from actorllm.engine.config.engine_config import EngineConfigError

FIELD = "speculative_config"
Method = Literal["ngram", "suffix", "draft_model", "eagle", "eagle3"]
BUILT_METHODS: tuple[Method, ...] = ("ngram", "suffix", "draft_model", "eagle", "eagle3")
# vLLM's methods that are not built here: refused by name, never swapped for another.
_NOT_BUILT = {
    "extract_hidden_states": "hidden-state extraction is not built",
    "medusa": "Medusa heads are not built",
    "mlp_speculator": "MLP speculators are not built",
    "mtp": "multi-token-prediction (MTP) layers are not built",
    "ngram_gpu": "the n-gram proposer runs on the host here: use method 'ngram'",
    "dflash": "DFlash drafting is not built",
    "dspark": "DSpark drafting is not built",
    "custom_class": "custom proposer classes are not supported",
}
# Keys of vLLM's SpeculativeConfig that ask for nothing at these values (its defaults);
# any other value asks for something not built here.
_DEFAULTS: dict[str, Any] = {
    "enforce_eager": None,
    "tensor_parallel_size": None,
    "quantization": None,
    "moe_backend": None,
    "attention_backend": None,
    "kv_cache_dtype": None,
    "max_model_len": None,
    "revision": None,
    "code_revision": None,
    "index_share_for_mtp_iteration": None,
    "disable_padded_drafter_batch": False,
    "disable_eagle_block_drop": False,
    "use_local_argmax_reduction": False,
    "use_heterogeneous_vocab": False,
    "parallel_drafting": False,
    "num_speculative_tokens_per_batch_size": None,
    "draft_load_config": None,
    "rejection_sample_method": "standard",
    "synthetic_acceptance_rates": None,
    "synthetic_acceptance_length": None,
    "enable_adaptive_verification": False,
    "draft_sample_method": "greedy",
    "dspark_draft_topk": None,
    # vLLM fills these itself from the target model; a user never sets them.
    "target_model_config": None,
    "target_parallel_config": None,
    "draft_model_config": None,
    "draft_parallel_config": None,
}
# vLLM's suffix decoding settings and their defaults (method "suffix" only).
SUFFIX_DEFAULTS: dict[str, int | float] = {
    "suffix_decoding_max_tree_depth": 24,
    "suffix_decoding_max_cached_requests": 10000,
    "suffix_decoding_max_spec_factor": 1.0,
    "suffix_decoding_min_token_prob": 0.1,
}
_BUILT = "'ngram', 'suffix', 'draft_model', 'eagle', 'eagle3'"
_OWN = ("method", "num_speculative_tokens", "model", "prompt_lookup_min", "prompt_lookup_max",
        "draft_tensor_parallel_size", *SUFFIX_DEFAULTS)  # fmt: skip


class SpeculativeConfig(msgspec.Struct, frozen=True, kw_only=True):
    """What speculation the engine runs (validated: build it with
    :func:`parse_speculative_config`)."""

    method: Method
    num_speculative_tokens: int  # k: draft tokens proposed per request per step
    prompt_lookup_min: int = 0  # ngram: the shortest suffix n-gram the proposer matches
    prompt_lookup_max: int = 0  # ngram: the longest
    model: str | None = None  # draft_model / eagle: the draft's (head's) directory or hub id
    # suffix: the tries' depth (match + draft), the past requests whose outputs are kept
    # (0: none), the draft's cap per matched token, the least probability of a draft token
    suffix_decoding_max_tree_depth: int = 24
    suffix_decoding_max_cached_requests: int = 10000
    suffix_decoding_max_spec_factor: float = 1.0
    suffix_decoding_min_token_prob: float = 0.1


def parse_speculative_config(value: Mapping[str, Any]) -> SpeculativeConfig:
    """Read vLLM's ``speculative_config`` dict; raises :class:`EngineConfigError` naming
    ``speculative_config`` and the key at fault."""
    if not isinstance(value, Mapping):
        raise _error(f"must be a JSON object, got {type(value).__name__}.")
    d = dict(value)
    for key, v in d.items():
        if key in _OWN:
            continue
        if key not in _DEFAULTS:
            raise _error(f"{key!r} is not a key of vLLM's SpeculativeConfig.")
        if v != _DEFAULTS[key]:
            raise _error(f"{key}={v!r} is not supported (only {_DEFAULTS[key]!r}).")
    method = d.get("method")
    model = d.get("model")
    if method is None and model in ("ngram", "[ngram]"):
        method = "ngram"  # vLLM's old spelling: model="[ngram]"
    if method == "[ngram]":
        method = "ngram"
    if method is None:
        if model is None:
            raise _error("give a method (e.g. 'ngram') or a draft model.")
        method = "custom_class" if _is_import_path(model) else "draft_model"
    if method == "draft_model" and isinstance(model, str):
        method = _method_from_name(model)
    if method in _NOT_BUILT or (isinstance(method, str) and method.endswith("_mtp")):
        why = _NOT_BUILT.get(method, _NOT_BUILT["mtp"])
        raise _error(f"method {method!r} is not supported: {why}. Built: {_BUILT}.")
    if method not in BUILT_METHODS:
        raise _error(f"unknown method {method!r}; built: {_BUILT}.")
    if method == "ngram" and model not in (None, "ngram", "[ngram]"):
        raise _error(f"model={model!r}: method 'ngram' takes no draft model.")
    if method == "suffix" and model not in (None, "suffix"):
        raise _error(f"model={model!r}: method 'suffix' takes no draft model.")
    if method != "suffix":
        for key in SUFFIX_DEFAULTS:
            if d.get(key, SUFFIX_DEFAULTS[key]) != SUFFIX_DEFAULTS[key]:
                raise _error(f"{key} is a suffix decoding setting; method {method!r} has none.")
    if method == "draft_model" and (not isinstance(model, str) or not model):
        raise _error("method 'draft_model' needs model: the draft model's path or hub id.")
    if method in ("eagle", "eagle3") and (not isinstance(model, str) or not model):
        raise _error(f"method {method!r} needs model: the EAGLE head's path or hub id.")
    tp = d.get("draft_tensor_parallel_size")
    if tp not in (None, 1):
        raise _error(
            f"draft_tensor_parallel_size={tp!r}: proposers run on the worker thread, "
            "unsharded (only 1 or unset)."
        )
    k = d.get("num_speculative_tokens")
    if method == "suffix":
        return _suffix(d, k)
    if k is None:
        raise _error("num_speculative_tokens is required (the draft tokens per step).")
    if type(k) is not int or k <= 0:
        raise _error(f"num_speculative_tokens must be a positive integer, got {k!r}.")
    if method not in ("ngram", "suffix"):  # a drafter with a model: draft_model, eagle(3)
        for key in ("prompt_lookup_min", "prompt_lookup_max"):
            if d.get(key) is not None:
                raise _error(f"{key} is an ngram setting; method {method!r} has none.")
        kind = cast(Method, method)  # one of BUILT_METHODS: checked above
        return SpeculativeConfig(method=kind, num_speculative_tokens=k, model=model)
    lo, hi = d.get("prompt_lookup_min"), d.get("prompt_lookup_max")
    for name, n in (("prompt_lookup_min", lo), ("prompt_lookup_max", hi)):
        if n is not None and (type(n) is not int or n < 1):
            raise _error(f"{name} must be an integer of at least 1, got {n!r}.")
    if lo is None and hi is None:
        lo = hi = 5
    lo = hi if lo is None else lo
    hi = lo if hi is None else hi
    assert lo is not None and hi is not None
    if lo > hi:
        raise _error(f"prompt_lookup_min={lo} must be <= prompt_lookup_max={hi}.")
    return SpeculativeConfig(
        method="ngram", num_speculative_tokens=k, prompt_lookup_min=lo, prompt_lookup_max=hi
    )


def _suffix(d: dict[str, Any], k: Any) -> SpeculativeConfig:
    """Method ``suffix``, checked as vLLM's ``_validate_suffix_decoding``: the draft cap
    ``num_speculative_tokens`` defaults to the tree depth (drafts are as long as the
    match allows, up to it)."""
    for key in ("prompt_lookup_min", "prompt_lookup_max"):
        if d.get(key) is not None:
            raise _error(f"{key} is an ngram setting; method 'suffix' has none.")
    v = {key: d.get(key, default) for key, default in SUFFIX_DEFAULTS.items()}
    for key, default in SUFFIX_DEFAULTS.items():
        kinds = (int,) if isinstance(default, int) else (int, float)
        if type(v[key]) not in kinds:
            kind = "an integer" if kinds == (int,) else "a number"
            raise _error(f"{key} must be {kind}, got {v[key]!r}.")
    depth, cached = v["suffix_decoding_max_tree_depth"], v["suffix_decoding_max_cached_requests"]
    factor, prob = v["suffix_decoding_max_spec_factor"], v["suffix_decoding_min_token_prob"]
    if depth < 1:  # vLLM's words, each check in its order
        raise _error(f"suffix_decoding_max_tree_depth={depth} must be >= 1")
    if cached < 0:
        raise _error(f"suffix_decoding_max_cached_requests={cached} must be >= 0")
    if factor < 0:
        raise _error(f"suffix_decoding_max_spec_factor={factor} must be >= 0")
    if not 0 <= prob <= 1:
        raise _error(f"suffix_decoding_min_token_prob={prob} must be in [0, 1]")
    if k is None:
        k = depth
    if type(k) is not int or k <= 0:
        raise _error(f"num_speculative_tokens must be a positive integer, got {k!r}.")
    return SpeculativeConfig(
        method="suffix",
        num_speculative_tokens=k,
        suffix_decoding_max_tree_depth=int(depth),
        suffix_decoding_max_cached_requests=int(cached),
        suffix_decoding_max_spec_factor=float(factor),
        suffix_decoding_min_token_prob=float(prob),
    )


def _is_import_path(model: object) -> bool:
    """vLLM's test for a custom proposer class (``pkg.module.Proposer``): dotted
    identifiers, no slash, not a URL."""
    if not isinstance(model, str) or "/" in model or model.startswith(("http:", "https:")):
        return False
    parts = model.split(".")
    return len(parts) >= 2 and all(p.isidentifier() for p in parts)


def _method_from_name(model: str) -> str:
    """vLLM's guess from the draft's name, made for ``draft_model`` (given or implied):
    ``eagle-`` (``yuhuili/EAGLE-LLaMA3-Instruct-8B``) is EAGLE, ``eagle3`` EAGLE-3, then
    ``dflash`` / ``dspark``; any other name stays a draft model (``my_eagle_head`` too)."""
    name = model.lower()
    for word, method in (("eagle-", "eagle"), ("eagle3", "eagle3"), ("dflash", "dflash"),
                         ("dspark", "dspark")):  # fmt: skip
        if word in name:
            return method
    return "draft_model"


def _error(message: str) -> EngineConfigError:
    return EngineConfigError(FIELD, message)
