"""Beam search's types where vLLM <= 0.11 kept them (``vllm.beam_search``); vLLM 0.32 has
them under ``vllm.entrypoints.generate.beam_search.utils``. The definitions live in
:mod:`actorllm.core.beam_search`.

    from actorllm.beam_search import BeamSearchOutput, BeamSearchSequence
"""

from actorllm.core.beam_search import (
    BeamSearchOutput,
    BeamSearchSequence,
    beam_score,
)

get_beam_search_score = beam_score  # vLLM's name

__all__ = ["BeamSearchOutput", "BeamSearchSequence", "get_beam_search_score"]
