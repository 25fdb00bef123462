"""The engine's configuration: ``EngineConfig`` (engine_config.py), its ``--help`` text
(cli_help.py), the model's view for callers (model_config.py), generation defaults,
structured outputs and interpreter settings.

``actorllm.engine.config.EngineConfig`` is a public import path; the names a caller
imports from here are re-exported.
"""

from actorllm.engine.config.engine_config import CPU_BLOCK_SIZE as CPU_BLOCK_SIZE
from actorllm.engine.config.engine_config import EngineConfig as EngineConfig
from actorllm.engine.config.engine_config import EngineConfigError as EngineConfigError
from actorllm.engine.config.engine_config import ModelNotFoundError as ModelNotFoundError
from actorllm.engine.config.sizes import parse_size as parse_size

__all__ = [
    "CPU_BLOCK_SIZE",
    "EngineConfig",
    "EngineConfigError",
    "ModelNotFoundError",
    "parse_size",
]
