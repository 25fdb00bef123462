"""Anthropic's Messages API (``/v1/messages``) as vLLM 0.32 serves it, on the chat path.

* ``protocol``: the request and response bodies
* ``to_chat``: request -> ``ChatCompletionRequest`` (refusing, by name, what it cannot map)
* ``events``: chat deltas -> the Messages stream's events
* ``serving``: create a message, count tokens, Anthropic's error body
"""
