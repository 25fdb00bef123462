"""Whether a request is watermarked: vLLM 0.32's ``_check_supports_watermarking`` for one
request (``vllm/config/vllm.py``), resolved once, by the input processor.

``SamplingParams.watermarking``: ``None`` (the default) and ``True`` ask for the engine's
watermark, ``False`` opts out. The answer is False, with vLLM's warning (once per
process, as vLLM's ``warning_once``), where the request cannot be watermarked: the engine
has no ``--watermark-config`` (a request asking ``True`` then runs unwatermarked, not
refused), greedy decoding, beam search. The resolved bool is stored on the request's own
params, so the worker reads one flag and a replayed request resolves the same way.

    >>> from actorllm.core.sampling_params import SamplingParams
    >>> from actorllm.core.watermark_config import WatermarkConfig
    >>> resolve_watermarking(WatermarkConfig(key=1), SamplingParams(temperature=0.8))
    True
    >>> resolve_watermarking(None, SamplingParams(watermarking=False))
    False
"""

from __future__ import annotations

import logging

from actorllm.core.sampling_params import SamplingParams
from actorllm.core.watermark_config import WatermarkConfig

logger = logging.getLogger(__name__)

NO_CONFIG = (
    "Watermarking is enabled for this request, but the engine has no watermark "
    "configuration. This and subsequent requests will run without watermarking."
)
GREEDY = (
    "Watermarking is enabled, but greedy decoding (temperature=0) cannot be watermarked. "
    "This and subsequent greedy requests will use ordinary greedy sampling."
)
BEAM_SEARCH = (
    "Watermarking is enabled, but beam search cannot be watermarked. This and subsequent "
    "beam search requests will run without watermarking."
)
_warned: set[str] = set()  # vLLM's warning_once(scope="global"): each sentence once


def warn_once(message: str) -> None:
    if message not in _warned:
        _warned.add(message)
        logger.warning(message)


def resolve_watermarking(config: WatermarkConfig | None, params: SamplingParams) -> bool:
    """Whether ``params``' request samples with the engine's watermark ``config``."""
    if config is None:
        if params.watermarking is True:
            warn_once(NO_CONFIG)
        return False
    if params.watermarking is False:
        return False
    if params.is_greedy:
        warn_once(GREEDY)
        return False
    return True


WATERMARK_STATUSES = ("watermarked", "skipped", "not_watermarked")


def watermark_status(config: WatermarkConfig | None, asked: bool | None, greedy: bool) -> str:
    """vLLM's ``vllm:watermark_requests`` status of a finished request: ``watermarked``,
    ``skipped`` (asked on a watermarking engine, but greedy), else ``not_watermarked``
    (opted out, or no watermark configured)."""
    if config is None or asked is False:
        return "not_watermarked"
    return "skipped" if greedy else "watermarked"


def resolve_beam_search(config: WatermarkConfig | None, watermarking: bool | None) -> bool:
    """Beam search is never watermarked (vLLM warns when it was asked or implied)."""
    if config is None:
        if watermarking is True:
            warn_once(NO_CONFIG)
    elif watermarking is not False:
        warn_once(BEAM_SEARCH)
    return False
