"""Other engines' APIs over actorllm's own (``compat/vllm``: vLLM's).

Layering: ``entrypoints`` uses ``compat``, which uses ``engine``; nothing in ``engine``
imports ``compat``. vLLM's import paths (``actorllm.engine.arg_utils``, ...) are kept as
one-line alias modules pointing here.
"""
