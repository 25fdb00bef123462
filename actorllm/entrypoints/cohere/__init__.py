"""Cohere's Chat v2 API (``/cohere/v2/chat``) as vLLM 0.32 serves it, on the chat path.

* ``protocol``: the request and response bodies (the Cohere SDK's wire shapes)
* ``to_chat``: request -> ``ChatCompletionRequest`` (refusing, by name, what it cannot map)
* ``events``: chat deltas -> the v2 stream's events
* ``serving``: one chat, its answer or its stream, usage, Cohere's error body
"""
