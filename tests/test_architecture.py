"""The layers point one way: no import cycle between the runner's modules (function-level imports
included), and no dynamic import of one of our own modules."""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _modules() -> dict[str, Path]:
    mods = {}
    for path in (ROOT / "runner").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def _imports(mods: dict[str, Path]) -> dict[str, set[str]]:
    edges: dict[str, set[str]] = defaultdict(set)
    for name, path in mods.items():
        package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                parts = package.split(".")
                base = ".".join(parts[:len(parts) - node.level + 1]) if node.level else ""
                target = ".".join(p for p in (base, node.module or "") if p)
                for candidate in (target, *(f"{target}.{a.name}" for a in node.names)):
                    if candidate in mods and candidate != name:
                        edges[name].add(candidate)
            elif isinstance(node, ast.Import):
                edges[name] |= {a.name for a in node.names if a.name in mods}
    return edges


def test_no_import_cycle_between_our_modules() -> None:
    mods = _modules()
    edges = _imports(mods)
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(name):] + [name]))
        if name in done:
            return
        for target in sorted(edges[name]):
            visit(target, path + [name])
        done.add(name)

    assert len(mods) > 40
    for name in sorted(mods):
        visit(name, [])


def test_no_dynamic_import_of_our_own_modules() -> None:
    for name, path in _modules().items():
        text = path.read_text()
        assert "import_module(" not in text and "__import__(" not in text, name
