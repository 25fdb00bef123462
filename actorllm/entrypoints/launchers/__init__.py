"""vLLM 0.32's launcher module paths (``python -m vllm.entrypoints.launchers.<name>``), so
such launch lines work after renaming ``vllm`` to ``actorllm``."""
