"""``WeightVersions``: which version of the weights each step runs on.

Owned by a replica's ``Admission`` (it outlives scheduler incarnations, like the weights
outlive them on the worker). A step is stamped with the current version when it is
launched; a weight swap is queued on the executor behind the steps already launched and
ahead of every later one, and the version changes only once the swap is done, so the
stamp is the version that computed the step's tokens, also with two steps in flight.

    >>> v = WeightVersions()
    >>> v.launched(1); v.current = "step-7"; v.launched(2)
    >>> v.done(1), v.done(2)
    ('default', 'step-7')
"""

from __future__ import annotations

from typing import final

DEFAULT_WEIGHT_VERSION = "default"  # vLLM's, before any finish_weight_update names one


@final
class WeightVersions:
    def __init__(self) -> None:
        self.current = DEFAULT_WEIGHT_VERSION  # the version new steps run on
        self._steps: dict[int, str] = {}  # {step_id: version}: launched, not done

    def launched(self, step_id: int) -> None:
        self._steps[step_id] = self.current

    def done(self, step_id: int) -> str:
        return self._steps.pop(step_id, self.current)

    def drain(self) -> None:
        """The steps in flight are gone (a core restart)."""
        self._steps.clear()
