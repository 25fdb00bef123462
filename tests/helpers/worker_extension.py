"""A worker extension as RL frameworks write them (TRL's ``WeightSyncWorkerExtension``
reads ``self.device`` and ``self.model_runner.model``): used by the worker-extension tests,
importable by dotted path in every rank's process."""

from __future__ import annotations

from typing import Any

import torch

PATH = "tests.helpers.worker_extension.ProbeExtension"


class ProbeExtension:
    """Reads what a trainer's extension reads on ``self`` (the worker)."""

    model_runner: Any
    rank: int
    device: torch.device

    def describe(self, tag: str = "") -> dict[str, Any]:
        model = self.model_runner.model
        return {
            "tag": tag,
            "rank": self.rank,
            "device": str(self.device),
            "has_model": model is not None,
        }

    def weight_sum(self) -> float:
        """The sum of this rank's weights (its shards under tensor parallel)."""
        model = self.model_runner.model
        return float(sum(p.detach().double().sum() for p in model.parameters()))

    def scale_weights(self, factor: float) -> None:
        """Multiply every weight in place (a stand-in for a trainer's update)."""
        with torch.no_grad():
            for p in self.model_runner.model.parameters():
                p.mul_(factor)


class ClashingExtension:
    """Redefines a worker method: refused."""

    def load_weights(self, weights: object) -> None:
        raise AssertionError("never mixed in")


NOT_A_CLASS = 3
