"""The OpenAPI 3.1 document served at /openapi.json: schemas generated from the msgspec
protocol structs (``msgspec.json.schema_components``), so it cannot drift from the code.

It tells the truth about *this* server: bounds that depend on the served model (token ids
below the vocabulary size, ``max_tokens`` below the context length, ``priority`` only 0
under the fcfs policy) are filled in from :class:`Served`; the rules between fields that
JSON Schema can state are added to the generated schemas (``rules.cross_field_rules``);
the ones it cannot (prompt tokens + ``max_tokens`` within the context, ``min_tokens <=
max_tokens``) are written in each operation's description. Authentication is documented
only when an API key is set, and every status a route can answer is listed.

    >>> doc = openapi_document(dev_mode=False, api_key=False, served=Served(64, 100, "fcfs"))
    >>> doc["components"]["schemas"]["CompletionRequest"]["properties"]["max_tokens"]
    {'anyOf': [{'type': 'integer', 'minimum': 1, 'maximum': 63}, {'type': 'null'}], 'default': 16}

One module per part:

* ``document``: :func:`openapi_document`, putting the parts together
* ``served``: :class:`Served` and what it decides (bounds, refused fields, pooling routes)
* ``prompt``: what a prompt may be (its forms, ``prompt_embeds``, chat content parts)
* ``rules``: the rules between fields added to the request schemas
* ``endpoints``: the route tables and the words for the rules JSON Schema cannot state
* ``paths``: the operations of every served route
* ``parts``: what they are built from ($refs, JSON bodies, SSE events, error answers)

The Responses API adds its own part (``responses/openapi.py``).
"""

from actorllm.entrypoints.openai.openapi.document import openapi_document
from actorllm.entrypoints.openai.openapi.served import Served

__all__ = ["Served", "openapi_document"]
