"""vLLM's Python API over :class:`actorllm.AsyncEngine`: the one vLLM-compatible layer.

* ``LLM`` (:mod:`llm`), ``LLMEngine`` (:mod:`llm_engine`) and ``AsyncLLM`` /
  ``AsyncLLMEngine`` (:mod:`async_llm`) share one thread bridge (:mod:`bridge`): the engine
  on its own event loop and thread (:mod:`engine_thread`), one output pump and one
  request-id renaming routine; :mod:`caller_loop` is ``AsyncLLM``'s asyncio side of it.
* :mod:`args` turns vLLM's engine arguments (keywords, ``EngineArgs`` in
  :mod:`engine_args`, a command-line namespace from :mod:`cli_args`) into an
  ``EngineConfig``, with one precedence; :mod:`foreign_flags` lists vLLM's arguments with
  no setting here.
* :mod:`argv_forms`, :mod:`config_file` and :mod:`struct_flags` build vLLM-style command
  lines (``FlexibleArgumentParser``, ``--config FILE.yaml``, flags from settings structs).

Modules are imported on use; this package imports nothing.
"""
