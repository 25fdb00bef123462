"""OpenAI's Responses API (``/v1/responses``) as vLLM 0.32 serves it, on the chat path.

A request's ``input`` items become chat messages (``to_chat.py``) and run through
``serving_chat``'s machinery (chat template, tool and reasoning parsers, structured
outputs, the engine's stream); what comes out is shaped as Responses output items
(``serving.py``), or streamed as Responses events (``events.py``). ``store.py`` keeps
finished responses for ``previous_response_id`` and ``GET /v1/responses/{id}`` when the
store is switched on (``ACTORLLM_ENABLE_RESPONSES_API_STORE=1``, as vLLM's
``VLLM_ENABLE_RESPONSES_API_STORE``).

* ``request``: the request body (``ResponsesRequest``) and its input items
* ``response``: the response object, its output items and usage
* ``to_chat``: request -> ``ChatCompletionRequest`` (refusing, by name, what it cannot map)
* ``events``: chat deltas -> the Responses stream's events
* ``store``: the bounded in-memory store
* ``serving``: create, retrieve, cancel
"""
