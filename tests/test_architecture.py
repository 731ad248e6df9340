"""The layers of ARCHITECTURE.md, checked on the source: every import points down or sideways (function-level
and ``TYPE_CHECKING`` imports included, relative and absolute), nothing in the runner imports the emulator,
no module uses another module's underscore-private names, no import cycle, no dynamic import of our own
modules, and ARCHITECTURE.md names every module.

A known violation whose fix is under way is listed, with that fix, in an allow-list below; an entry whose
violation is gone fails the test too, so the list only shrinks."""

from __future__ import annotations

import ast
import re
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

# Each package or top-level module of runner/ and its layer, lowest first. A module may import from its
# own layer and the layers below, never from one above.
LAYERS = {
    # 0. plain data and protocols
    "runner": 0,  # the empty package file
    "runner.messages": 0,
    "runner.services": 0,
    "runner.listen": 0,
    "runner.pricing": 0,
    "runner.billing": 0,
    # 1. configuration and the run directory's files
    "runner.config": 1,
    "runner.config_table": 1,  # the README's table of config keys, made from the settings models
    "runner.jobs": 1,
    "runner.rundir": 1,
    "runner.protocol": 1,  # the texts a model reads name the run directory's files (transcript.jsonl)
    # 2. models, tools, compaction
    "runner.models": 2,
    "runner.tools": 2,
    "runner.compaction": 2,
    "runner.offline": 2,  # the offline stand-in: built only by the backend switch (STAND_IN_ENTRY)
    # 3. the agent: one job
    "runner.agent": 3,
    # 4. what an operator sees: the live display, the run table, the viewer (execution drives them)
    "runner.ui": 4,
    # 5. executing a batch: local, Ray, resume
    "runner.execution": 5,
    # 5. replaying recorded histories through the Compactor (an operator's measure, beside execution)
    "runner.replay": 5,
    # 6. the command line
    "runner.cli": 6,
    "runner.commands": 6,  # the commands cli dispatches to (run, resume) and what they share
    "runner.__main__": 6,
}
EMULATOR = "runner.emulator"  # a separate application: it may import the runner; the runner never imports it
# The one way in: ``runner emulate`` (the command line serves both applications).
EMULATOR_ENTRY = {("runner.cli", "runner.emulator.cli")}

STAND_IN = "runner.offline"  # the offline stand-in: a Model, not part of the runtime
# The one way in: the backend switch builds it (for ``backend = "offline"`` and the emulator's replies).
STAND_IN_ENTRY = {("runner.execution.backend", "runner.offline.model")}

# Imports that point up a layer today, each with the fix under way. Nothing else may.
KNOWN_UPWARD = {}
# Underscore-private names used across modules today, each with the fix under way.
KNOWN_PRIVATE = {}
# Underscore names that are public API of a library.
PUBLIC_UNDERSCORE = {"os._exit"}


@dataclass(frozen=True)
class Import:
    importer: str
    imported: str  # one of our modules, or a library's dotted name
    name: str | None  # the name a ``from`` import takes from ``imported`` (None: the module itself)
    binds: str  # the name it binds in the importer
    line: int


def _modules() -> dict[str, Path]:
    mods = {}
    for path in (ROOT / "runner").rglob("*.py"):
        name = ".".join(path.relative_to(ROOT).with_suffix("").parts)
        mods[name.removesuffix(".__init__")] = path
    return mods


def _imports(name: str, path: Path, mods: dict[str, Path]) -> Iterator[Import]:
    """Every import of ``name`` (at any depth), resolved: ``from . import x`` is module ``x`` when it is one,
    else a name of the package."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            parts = package.split(".")
            base = ".".join(parts[: len(parts) - node.level + 1]) if node.level else ""
            target = ".".join(p for p in (base, node.module or "") if p)
            for alias in node.names:
                module = f"{target}.{alias.name}"
                binds = alias.asname or alias.name
                if module in mods:
                    yield Import(name, module, None, binds, node.lineno)
                else:
                    yield Import(name, target, alias.name, binds, node.lineno)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                binds = alias.asname or alias.name.split(".")[0]
                yield Import(name, alias.name, None, binds, node.lineno)


def _ours(mods: dict[str, Path]) -> list[Import]:
    return [
        i
        for name, path in sorted(mods.items())
        for i in _imports(name, path, mods)
        if i.imported in mods and i.imported != i.importer
    ]


def _layer(module: str) -> int | None:
    parts = module.split(".")
    for end in range(len(parts), 1, -1):
        if ".".join(parts[:end]) in LAYERS:
            return LAYERS[".".join(parts[:end])]
    return LAYERS.get(module)  # only the package file itself is "runner"


def _in_emulator(module: str) -> bool:
    return module == EMULATOR or module.startswith(EMULATOR + ".")


def _in_stand_in(module: str) -> bool:
    return module == STAND_IN or module.startswith(STAND_IN + ".")


def _private(name: str) -> bool:
    return name.startswith("_") and not (name.endswith("__") and len(name) > 4)


def test_every_module_has_a_layer() -> None:
    mods = _modules()
    assert len(mods) > 40
    assert not [m for m in mods if not _in_emulator(m) and _layer(m) is None], "add it to LAYERS"


def test_imports_point_down_the_layers() -> None:
    found, upward = set(), []
    for i in _ours(_modules()):
        if _in_emulator(i.importer) or _in_emulator(i.imported):
            continue
        a, b = _layer(i.importer), _layer(i.imported)
        assert a is not None and b is not None
        if b > a:
            found.add((i.importer, i.imported))
            if (i.importer, i.imported) not in KNOWN_UPWARD:
                upward.append(f"{i.importer} -> {i.imported} (layer {a} -> {b}), line {i.line}")
    assert not upward, "imports that point up a layer:\n" + "\n".join(upward)
    assert not set(KNOWN_UPWARD) - found, f"fixed: remove from KNOWN_UPWARD: {set(KNOWN_UPWARD) - found}"


def test_nothing_in_the_runner_imports_the_emulator() -> None:
    into = [
        f"{i.importer} -> {i.imported}, line {i.line}"
        for i in _ours(_modules())
        if _in_emulator(i.imported)
        and not _in_emulator(i.importer)
        and (i.importer, i.imported) not in EMULATOR_ENTRY
    ]
    assert not into, "the runner imports the emulator:\n" + "\n".join(into)


def _stand_in_leaks(mods: dict[str, Path]) -> list[str]:
    """Imports of the stand-in from outside its package, but the backend switch's."""
    return [
        f"{i.importer} -> {i.imported}, line {i.line}"
        for i in _ours(mods)
        if _in_stand_in(i.imported)
        and not _in_stand_in(i.importer)
        and (i.importer, i.imported) not in STAND_IN_ENTRY
    ]


def test_only_the_backend_switch_builds_the_offline_stand_in() -> None:
    """The runtime does not serve the stand-in: no module outside ``runner/offline/`` imports it but
    the backend switch (the emulator gets its replies from the switch, through the ``Model`` protocol)."""
    mods = _modules()
    leaks = _stand_in_leaks(mods)
    assert not leaks, "the runtime imports the offline stand-in:\n" + "\n".join(leaks)
    found = {(i.importer, i.imported) for i in _ours(mods) if _in_stand_in(i.imported)}
    assert STAND_IN_ENTRY <= found, f"the entry moved: update STAND_IN_ENTRY ({found})"


def test_the_stand_in_check_fails_on_a_runtime_import(tmp_path: Path) -> None:
    """A runtime module that imports the stand-in (relatively or not) is named by the check."""
    (tmp_path / "compaction").mkdir()
    module = tmp_path / "compaction" / "leak.py"
    module.write_text("from ..offline.policy import decide\nimport runner.offline.readback\n")
    leaks = _stand_in_leaks({**_modules(), "runner.compaction.leak": module})
    assert leaks == [
        "runner.compaction.leak -> runner.offline.policy, line 1",
        "runner.compaction.leak -> runner.offline.readback, line 2",
    ]


def _private_uses(name: str, path: Path, mods: dict[str, Path]) -> Iterator[tuple[str, str]]:
    """(owner, what) for each underscore name of another module that ``name`` imports or reaches through
    a name it imported (``x._y``, ``a.b._y``)."""
    bound: dict[str, str] = {}  # a name bound by an import -> the dotted thing it is
    for i in _imports(name, path, mods):
        if i.name is not None:
            bound[i.binds] = f"{i.imported}.{i.name}"
        else:  # ``import a.b`` binds ``a``; ``import a.b as c`` and ``from a import b`` bind ``a.b``
            bound[i.binds] = i.binds if i.binds == i.imported.split(".")[0] else i.imported
        if i.name is not None and _private(i.name):
            yield i.imported, f"{name} -> {i.imported}: imports {i.name}, line {i.line}"
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            chain, value = [], node.value
            while isinstance(value, ast.Attribute):
                chain.append(value.attr)
                value = value.value
            if isinstance(value, ast.Name) and value.id in bound:
                owner = ".".join([bound[value.id], *reversed(chain)])
                if f"{owner}.{node.attr}" not in PUBLIC_UNDERSCORE:
                    yield owner, f"{name} -> {owner}.{node.attr}, line {node.lineno}"


def test_no_module_uses_another_modules_private_names() -> None:
    mods = _modules()
    found, problems = set(), []
    for name, path in sorted(mods.items()):
        for owner, what in _private_uses(name, path, mods):
            found.add((name, owner))
            if (name, owner) not in KNOWN_PRIVATE:
                problems.append(what)
    assert not problems, "private names of another module:\n" + "\n".join(problems)
    assert not set(KNOWN_PRIVATE) - found, f"fixed: remove from KNOWN_PRIVATE: {set(KNOWN_PRIVATE) - found}"


def test_no_import_cycle_between_our_modules() -> None:
    mods = _modules()
    edges: dict[str, set[str]] = defaultdict(set)
    for i in _ours(mods):
        edges[i.importer].add(i.imported)
    done: set[str] = set()

    def visit(name: str, path: list[str]) -> None:
        if name in path:
            raise AssertionError("import cycle: " + " -> ".join(path[path.index(name) :] + [name]))
        if name in done:
            return
        for target in sorted(edges[name]):
            visit(target, path + [name])
        done.add(name)

    for name in sorted(mods):
        visit(name, [])


def test_no_dynamic_import_of_our_own_modules() -> None:
    for name, path in _modules().items():
        text = path.read_text()
        assert "import_module(" not in text and "__import__(" not in text, name


def test_architecture_md_names_every_module() -> None:
    """Each module by its path under runner/ (``agent/session.py``), a package by its folder (``agent/``)."""
    text = (ROOT / "ARCHITECTURE.md").read_text()
    missing = []
    for path in sorted((ROOT / "runner").rglob("*.py")):
        relative = path.relative_to(ROOT / "runner").as_posix()
        if relative == "__init__.py":
            continue
        named = relative.removesuffix("__init__.py")  # a package: its folder
        if not re.search(rf"`(runner/)?{re.escape(named)}`", text):
            missing.append(named)
    assert not missing, "ARCHITECTURE.md does not name: " + ", ".join(missing)
