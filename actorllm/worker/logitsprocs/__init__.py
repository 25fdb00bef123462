"""Custom logits processors, vLLM's V1 interface (``vllm.v1.sample.logits_processor``):
classes named by ``--logits-processors`` (``module:Class``) or installed as plugins, built
once per model runner, told of every change of the persistent batch and applied to each
step's logits (docs/offline.md, "Custom logits processors")."""
