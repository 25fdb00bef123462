"""actorllm: an LLM inference and serving engine on a structured-concurrency actor system."""

__version__ = "0.1.0"
