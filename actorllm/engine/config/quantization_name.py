"""``ModelConfig.quantization``: the name vLLM's ``ModelConfig.quantization`` holds for a
checkpoint, so code that introspects it (``engine.get_model_config().quantization``)
reads what it reads under vLLM.

vLLM 0.32 resolves the name in ``ModelConfig._verify_quantization``: the checkpoint's
``quant_method``, replaced by the method that overrides it. GPTQ checkpoints become
``auto_gptq`` on every platform; AWQ ones ``auto_awq`` except on CPU (where vLLM's
``AutoAWQConfig`` declines the override and ``awq`` stays); gpt-oss's ``mxfp4`` becomes
``gpt_oss_mxfp4``. Unquantized checkpoints give None; a GGUF file ``gguf`` (vLLM's name
for it before 0.32 dropped GGUF).
"""

from __future__ import annotations

from pathlib import Path


def vllm_quantization_name(model: Path, device: str) -> str | None:
    """The quantization method vLLM names for the checkpoint at ``model`` on ``device``."""
    from actorllm.models.config import CheckpointConfig

    cfg = CheckpointConfig.from_pretrained(model)
    raw = cfg.quantization_config
    if raw is None:
        return None
    method = str(raw.get("quant_method", "")).lower() or None
    if method == "gptq":
        return "auto_gptq"
    if method == "awq":
        return "awq" if device == "cpu" else "auto_awq"
    if method == "mxfp4" and cfg.model_type == "gpt_oss":
        return "gpt_oss_mxfp4"
    return method
