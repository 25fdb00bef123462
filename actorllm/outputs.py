"""Result types, where vLLM keeps them (``vllm.outputs``).

    from actorllm.outputs import CompletionOutput, RequestOutput

The definitions live in :mod:`actorllm.core.outputs`; this module only gives them vLLM's
import path.
"""

from actorllm.core.outputs import CompletionOutput, Logprob, RequestMetrics, RequestOutput

__all__ = ["CompletionOutput", "Logprob", "RequestMetrics", "RequestOutput"]
