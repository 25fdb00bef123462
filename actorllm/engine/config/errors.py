"""The error every engine setting raises when it is wrong, naming the field."""

from __future__ import annotations


class EngineConfigError(ValueError):
    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.param = field
