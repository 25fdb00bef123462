"""vLLM's scale-out API (``--enable-scale-out``): a request is rendered to the token ids and
sampling parameters the engine would run (``render``), run token-in/token-out
(``generate``), and its token output turned back into an OpenAI answer (``derender``),
possibly on three different servers. Each stage reuses the serving path of the plain
route: render is the chat/completions request building without the submit, generate is
``AsyncEngine.generate`` (the same supervised request path), derender is the
detokenizer the plain routes use.

The wire is vLLM's: ``sampling_params`` travel in vLLM's serialised form
(``vllm_sampling``), so a vLLM render server can feed an actorllm generate server and back.
"""
