"""examples/structured_outputs.py runs as written and every answer has its shape."""

import re

import pytest

from tests.engine.test_llm_examples import run_example


@pytest.mark.timeout(240)
def test_structured_outputs_example(tiny_model):
    lines = run_example("structured_outputs.py", tiny_model).splitlines()
    by_name = dict(line.split(": ", 1) for line in lines if not line.startswith(" "))
    assert set(by_name) == {"json", "regex", "choice", "grammar"}
    assert any(line.startswith("  parsed: City(") for line in lines)
    assert re.fullmatch(r"[A-Z][a-z]{1,10}, [A-Z]{2}", by_name["regex"])
    assert by_name["choice"] in ("positive", "negative", "neutral")
    assert re.fullmatch(r"(yes|no) because [a-z]{1,12}", by_name["grammar"])
