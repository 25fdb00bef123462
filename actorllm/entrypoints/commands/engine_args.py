"""The engine's flags for the commands (``serve``, ``generate``, ``chat``, ``bench``): the
vLLM-compatible flags and their translation are :mod:`actorllm.compat.vllm.cli_args`."""

from actorllm.compat.vllm.cli_args import add_engine_arguments as add_engine_arguments
from actorllm.compat.vllm.cli_args import describe_error as describe_error
from actorllm.compat.vllm.cli_args import engine_config as engine_config
from actorllm.compat.vllm.cli_args import engine_kwargs as engine_kwargs
from actorllm.compat.vllm.cli_args import kv_transfer_config as kv_transfer_config
from actorllm.compat.vllm.cli_args import structured_outputs_config as structured_outputs_config

__all__ = [
    "add_engine_arguments",
    "describe_error",
    "engine_config",
    "engine_kwargs",
    "kv_transfer_config",
    "structured_outputs_config",
]
