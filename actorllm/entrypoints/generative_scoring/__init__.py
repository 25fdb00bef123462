"""vLLM's generative scoring (``POST /generative_scoring``) for generative models: the
probability of chosen label tokens at the position after a query+item prompt, read from
one generated step of each prompt through the engine (``logprob_token_ids``: exact
full-vocabulary logprobs, not a top-k).

* ``protocol``: the request and response bodies
* ``prompts``: query and items -> one token prompt per item
* ``probabilities``: label logprobs -> the item's score (both normalisations)
* ``serving``: validate, run the prompts, answer
* ``openapi``: the route's part of the OpenAPI document
"""
