"""Constrained decoding: grammar backends (xgrammar, llguidance), the compile pool, and the
per-scheduler matcher state that produces each step's token bitmask.

See docs/structured_outputs.md. ``core/`` sees this only through
``core.scheduler.grammar.GrammarTracker``; the worker only sees the bitmask rows.
"""

from actorllm.core.structured_outputs_params import StructuredOutputsError, StructuredOutputsParams
from actorllm.structured_output.backend import BACKEND_CHOICES, BackendChoice
from actorllm.structured_output.compiler import GrammarCompiler
from actorllm.structured_output.manager import StructuredOutputManager

__all__ = [
    "BACKEND_CHOICES",
    "BackendChoice",
    "GrammarCompiler",
    "StructuredOutputManager",
    "StructuredOutputsError",
    "StructuredOutputsParams",
]
