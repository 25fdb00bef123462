"""Every import in ``actorllm/`` points down the layer order of docs/architecture.md.

The order is written once, in the ``layers`` block of docs/architecture.md §1 (top layer
first); this test reads it from there. A module belongs to the layer of the longest
dotted prefix listed for it. An import may reach its own layer or any layer below; one
that reaches up fails, whether it sits at module level or inside a function. Imports
under ``if TYPE_CHECKING:`` are exempt (they never run), as is the package's
``__version__`` (``actorllm/__init__.py`` is the public top, and the version string is
all a lower layer may read from it).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "actorllm"
DOC = ROOT / "docs" / "architecture.md"

# (importing module, imported module, names): imports allowed although they reach up.
EXEMPT_NAMES = {"__version__"}


def read_layers(text: str) -> list[tuple[str, list[str]]]:
    """The ``layers`` fenced block: one line per layer, top first, ``name  pkg pkg ...``."""
    block = re.search(r"```layers\n(.*?)```", text, re.S)
    assert block, "docs/architecture.md has no ```layers block"
    layers = []
    for line in block.group(1).splitlines():
        line = line.split("#", 1)[0].strip()
        if line:
            name, *prefixes = line.split()
            layers.append((name, prefixes))
    return layers


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def is_module(dotted: str) -> bool:
    base = ROOT.joinpath(*dotted.split("."))
    return base.with_suffix(".py").exists() or (base / "__init__.py").exists()


class _Imports(ast.NodeVisitor):
    """(line, imported module, names) of every import outside ``if TYPE_CHECKING:``."""

    def __init__(self, module: str, is_package: bool) -> None:
        self.package = module if is_package else module.rpartition(".")[0]
        self.found: list[tuple[int, str, list[str]]] = []

    def visit_If(self, node: ast.If) -> None:
        test = node.test
        name = test.id if isinstance(test, ast.Name) else getattr(test, "attr", None)
        if name == "TYPE_CHECKING":
            for child in node.orelse:
                self.visit(child)
            return
        self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            self.found.append((node.lineno, alias.name, []))

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level:
            parts = self.package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1])
            source = f"{base}.{node.module}" if node.module else base
        else:
            source = node.module or ""
        names = [a.name for a in node.names]
        submodules = [f"{source}.{n}" for n in names if is_module(f"{source}.{n}")]
        if submodules:  # ``from pkg import module``: the module is what is imported
            self.found.extend((node.lineno, m, []) for m in submodules)
        else:
            self.found.append((node.lineno, source, names))


def layer_of(module: str, layers: list[tuple[str, list[str]]]) -> int:
    """Index in ``layers`` (0 = top) of the longest prefix that names ``module``."""
    best, best_len = -1, -1
    for index, (_, prefixes) in enumerate(layers):
        for prefix in prefixes:
            if (module == prefix or module.startswith(prefix + ".")) and len(prefix) > best_len:
                best, best_len = index, len(prefix)
    return best


LAYERS = read_layers(DOC.read_text())
MODULES = sorted(PACKAGE.rglob("*.py"))


def test_the_layer_block_names_each_package_once() -> None:
    prefixes = [p for _, ps in LAYERS for p in ps]
    assert len(prefixes) == len(set(prefixes))
    for prefix in prefixes:
        assert is_module(prefix), f"{prefix} (docs/architecture.md layers) is not a module"


def test_every_subpackage_has_a_layer() -> None:
    listed = {p for _, ps in LAYERS for p in ps}
    for path in PACKAGE.iterdir():
        if path.is_dir() and (path / "__init__.py").exists():
            assert f"actorllm.{path.name}" in listed, f"actorllm.{path.name} has no layer"


@pytest.mark.parametrize("path", MODULES, ids=lambda p: module_name(p))
def test_imports_point_down(path: Path) -> None:
    module = module_name(path)
    own = layer_of(module, LAYERS)
    assert own >= 0, f"{module} has no layer"
    visitor = _Imports(module, path.name == "__init__.py")
    visitor.visit(ast.parse(path.read_text(), str(path)))
    upward = []
    for line, target, names in visitor.found:
        if not target.startswith("actorllm"):
            continue
        if names and set(names) <= EXEMPT_NAMES:
            continue
        theirs = layer_of(target, LAYERS)
        if theirs < own:  # a smaller index is a higher layer
            upward.append(
                f"{path.relative_to(ROOT)}:{line}: {module} ({LAYERS[own][0]})"
                f" imports {target} ({LAYERS[theirs][0]})"
            )
    assert not upward, "imports that reach up:\n" + "\n".join(upward)
