"""vLLM 0.32's refusal of the pooling request fields it removed
(``reject_removed_pooling_parameters``, a raw-body check of ``/v1/embeddings``, ``/pooling``
and ``/classify``): ``normalize`` (any value, null too) and the old tasks ``score`` and
``encode``. Unchecked, ``normalize`` would be an unknown field, ignored with a warning, and
``"normalize": false`` would return normalized vectors; vLLM answers 400.

    >>> try:
    ...     reject_removed_pooling_fields({"input": "hi", "normalize": False})
    ... except Exception as exc:
    ...     print(exc.param)
    normalize
"""

from __future__ import annotations

from typing import Any

from actorllm.entrypoints.openai.errors import bad_request

# vLLM's vllm/tasks.py: _REMOVED_POOLING_TASK_MESSAGES
_REMOVED_TASKS = {
    "score": "`score` task was removed; use `classify` instead.",
    "encode": "`encode` task was removed; use `token_embed` or `token_classify` instead.",
}


def reject_removed_pooling_fields(raw: dict[str, Any]) -> None:
    """400 naming ``normalize`` or ``task`` (vLLM's messages) before the fields are typed."""
    if "normalize" in raw:
        raise bad_request(
            "Parameter `normalize` was removed; use `use_activation` instead.", "normalize"
        )
    task = raw.get("task")
    if isinstance(task, str) and task in _REMOVED_TASKS:
        raise bad_request(_REMOVED_TASKS[task], "task")
