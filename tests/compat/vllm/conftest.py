"""The engine tests' model fixtures, for the front doors' tests."""

from tests.engine.conftest import other_model, tiny_model

__all__ = ["other_model", "tiny_model"]
