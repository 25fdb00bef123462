"""vLLM's ``vllm.v1.sample`` path (its logits-processor interface lives below)."""
