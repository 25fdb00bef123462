"""Speculative decoding on the worker: proposers (``ngram.py``) and the verifier
(``verify.py``). ``docs/speculative.md`` has the whole picture."""
