"""worker/ and distributed/ import nothing above them (lazy imports inside functions
included): distributed/ is transport and sits below worker/; worker/ sits below engine/."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import actorllm

PACKAGE = Path(actorllm.__file__).parent
ABOVE = {
    "distributed": ("worker", "engine", "compat", "entrypoints", "testing", "bench", "v1"),
    "worker": ("engine", "compat", "entrypoints", "testing", "bench", "v1"),
}


def _imports(path: Path) -> set[str]:
    """Every ``actorllm.*`` module ``path`` imports, at any depth."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
    return {n for n in names if n.startswith("actorllm.")}


@pytest.mark.parametrize("layer", sorted(ABOVE))
def test_a_layer_imports_nothing_above_it(layer: str) -> None:
    upward = {
        f"{path.relative_to(PACKAGE)}: {name}"
        for path in sorted((PACKAGE / layer).rglob("*.py"))
        for name in _imports(path)
        if name.split(".")[1] in ABOVE[layer]
    }
    assert not upward, sorted(upward)
