"""The unchanged files that import a changed one (``runner/rundir/dependents.py``): Python's absolute,
relative and package imports through ``ast``, JavaScript's and TypeScript's relative specifiers, cycles,
files that are not Python, and the bounds (a huge file skipped unread, links never followed), on real
trees and manifests."""

from __future__ import annotations

import os
from pathlib import Path

from runner.rundir import dependents
from runner.rundir.dependents import RESOLVERS, Tree, find, js_imports, python_imports
from runner.rundir.manifest import build, diff


def write(root: Path, files: dict[str, str]) -> Path:
    for name, text in files.items():
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        (root / name).write_text(text)
    return root


def night_two(ws: Path, edit: dict[str, str]) -> dependents.Dependents:
    """The dependents after ``edit`` (path -> new text; "" removes the file), as an incremental job
    computes them."""
    before = build(ws)
    for name, text in edit.items():
        if text:
            write(ws, {name: text})
        else:
            (ws / name).unlink()
    after = build(ws)
    return find(ws, after, diff(before, after))


def test_python_absolute_imports_from_the_top_and_a_src_layout() -> None:
    tree = Tree(
        [
            "app/__init__.py",
            "app/db.py",
            "app/web/__init__.py",
            "app/web/views.py",
            "src/lib/__init__.py",
            "src/lib/core.py",
            "tools/run.py",
            "tools/helpers.py",
            "main.py",
        ]
    )
    assert python_imports("main.py", "import app.web.views\n", tree) == {
        "app/__init__.py",
        "app/web/__init__.py",
        "app/web/views.py",
    }
    assert python_imports("main.py", "from app import db\n", tree) == {"app/__init__.py", "app/db.py"}
    assert python_imports("main.py", "from lib.core import f\n", tree) == {
        "src/lib/__init__.py",
        "src/lib/core.py",
    }
    assert python_imports("tools/run.py", "import helpers\n", tree) == {"tools/helpers.py"}  # a sibling
    assert python_imports("main.py", "import os, json\nfrom typing import Any\n", tree) == set()
    inside = "def f():\n    from app.db import x\n    return x\n"
    assert python_imports("main.py", inside, tree) == {"app/__init__.py", "app/db.py"}


def test_python_relative_imports_and_the_package_init() -> None:
    tree = Tree(["pkg/__init__.py", "pkg/a.py", "pkg/b.py", "pkg/sub/__init__.py", "pkg/sub/c.py", "top.py"])
    assert python_imports("pkg/sub/c.py", "from ..a import x\n", tree) == {"pkg/a.py"}
    assert python_imports("pkg/sub/c.py", "from .. import b\n", tree) == {"pkg/__init__.py", "pkg/b.py"}
    assert python_imports("pkg/a.py", "from . import sub\n", tree) == {
        "pkg/__init__.py",
        "pkg/sub/__init__.py",
    }
    assert python_imports("pkg/a.py", "from .sub import *\n", tree) == {"pkg/sub/__init__.py"}
    assert python_imports("pkg/a.py", "from .... import nothing\n", tree) == set()  # above the top
    assert python_imports("top.py", "from pkg import thing\n", tree) == {"pkg/__init__.py"}


def test_a_workspace_that_is_a_package_is_imported_by_its_own_name() -> None:
    tree = Tree(["__init__.py", "decoder.py", "tool.py"], name="json")
    assert python_imports("tool.py", "import json\n", tree) == {"__init__.py"}
    assert python_imports("tool.py", "from json.decoder import X\n", tree) == {"__init__.py", "decoder.py"}
    assert python_imports("tool.py", "from . import decoder\n", tree) == {"__init__.py", "decoder.py"}


def test_js_and_ts_relative_specifiers() -> None:
    tree = Tree(
        ["web/app.ts", "web/util.ts", "web/lib/index.js", "web/api.js", "web/old.cjs", "shared/x.tsx"]
    )
    text = (
        "import { a } from './util';\n"
        'import lib from "./lib";\n'
        "export * from '../shared/x';\n"
        "const old = require('./old.cjs');\n"
        "import('./api.js').then(() => 0);\n"
        "import React from 'react';\n"
        "import '../../outside';\n"
    )
    assert js_imports("web/app.ts", text, tree) == {
        "web/util.ts",
        "web/lib/index.js",
        "shared/x.tsx",
        "web/old.cjs",
        "web/api.js",
    }
    assert js_imports("web/api.js", "import { a } from './util.js';\n", tree) == {"web/util.ts"}  # TS's .js
    assert {RESOLVERS[s] for s in (".js", ".mjs", ".ts", ".tsx")} == {js_imports}
    assert RESOLVERS[".py"] is python_imports


def test_the_unchanged_importers_of_a_changed_module(tmp_path: Path) -> None:
    ws = write(
        tmp_path / "ws",
        {
            "pkg/__init__.py": "",
            "pkg/core.py": "X = 1\n",
            "pkg/user.py": "from .core import X\n",
            "pkg/other.py": "from pkg import core\n",
            "app.py": "import pkg.core\n",
            "unrelated.py": "import os  # mentions core only in a comment\n",
            "web/main.js": "const c = require('./core');\n",
            "web/core.js": "module.exports = 1;\n",
            "notes.txt": "import pkg.core\n",
        },
    )
    found = night_two(ws, {"pkg/core.py": "X = 2\n", "web/core.js": "module.exports = 2;\n"})
    assert found.on == {
        "pkg/core.py": ["app.py", "pkg/other.py", "pkg/user.py"],
        "web/core.js": ["web/main.js"],
    }
    assert found.files == ["app.py", "pkg/other.py", "pkg/user.py", "web/main.js"]
    assert found.skipped == {}
    removed = night_two(ws, {"pkg/core.py": ""})  # a removed module's importers depend on it too
    assert removed.on == {"pkg/core.py": ["app.py", "pkg/other.py", "pkg/user.py"]}


def test_a_cycle_lists_only_the_unchanged_side(tmp_path: Path) -> None:
    ws = write(tmp_path / "ws", {"a.py": "import b\n", "b.py": "import a\n", "c.py": "import b\n"})
    found = night_two(ws, {"a.py": "import b\nY = 1\n"})
    assert found.on == {"a.py": ["b.py"]}  # direct importers only: c.py imports b, not a


def test_syntax_errors_huge_files_and_links_are_skipped_and_counted(tmp_path: Path) -> None:
    ws = write(
        tmp_path / "ws",
        {
            "mod.py": "A = 1\n",
            "broken.py": "import mod\ndef (:\n",
            "nul.py": "import mod\n\0\n",
            "deep.py": "import mod\nx = " + "(" * 5000 + ")" * 5000 + "\n",
            "huge.py": "import mod\n" + "#" * (dependents.MAX_FILE_BYTES + 10) + "\n",
            "good.py": "import mod\n",
        },
    )
    outside = write(tmp_path / "outside", {"evil.py": "import mod\n"})
    os.symlink(outside / "evil.py", ws / "link.py")
    os.symlink(outside, ws / "linked")
    found = night_two(ws, {"mod.py": "A = 2\n"})
    assert found.on == {"mod.py": ["good.py"]}
    assert found.skipped == {dependents.NOT_PARSABLE: 3, dependents.TOO_BIG: 1}


def test_a_file_swapped_for_a_link_is_not_followed(tmp_path: Path) -> None:
    ws = write(tmp_path / "ws", {"mod.py": "A = 1\n", "sub/user.py": "import mod\n"})
    outside = write(tmp_path / "outside", {"user.py": "import mod\n"})
    top = os.open(ws, os.O_RDONLY | os.O_DIRECTORY)
    try:
        assert dependents.read_beneath(top, "sub/user.py", 100) == b"import mod\n"
        assert dependents.read_beneath(top, "sub/user.py", 5) == dependents.TOO_BIG
        (ws / "sub" / "user.py").unlink()
        os.symlink(outside / "user.py", ws / "sub" / "user.py")
        assert dependents.read_beneath(top, "sub/user.py", 100) == dependents.UNREADABLE
        (ws / "sub" / "user.py").unlink()
        (ws / "sub").rmdir()
        os.symlink(outside, ws / "sub")
        assert dependents.read_beneath(top, "sub/user.py", 100) == dependents.UNREADABLE
        assert dependents.read_beneath(top, "../outside/user.py", 100) == dependents.UNREADABLE
    finally:
        os.close(top)


def test_the_name_filter_never_hides_an_importer_and_reads_each_text_once(monkeypatch) -> None:
    """The filter that spares the parser (a text must hold a changed file's stem as whole words) lets
    through every text whose imports the resolvers would find, for stems with dashes, dots and
    underscores; and it scans each text once, however many files changed (it scanned every text once
    per changed file's stem: a commit of 8,000 empty files stalled a night for minutes)."""
    stems = ["core", "foo-bar", "jquery.min", "snake_case", "x2", "über"]
    files = [f"web/{s}.js" for s in stems] + [f"pkg/{s}.py" for s in ("core", "snake_case", "x2")]
    files += ["pkg/__init__.py", *(f"added/m{i}.py" for i in range(3000))]
    tree = Tree([*files, "web/app.js", "pkg/user.py"])
    sources = [
        ("web/app.js", "".join(f"import a from './{s}';\nrequire('./{s}.js');\n" for s in stems)),
        ("pkg/user.py", "from .core import a\nimport pkg.snake_case\nfrom pkg import x2\n"),
    ]
    changed = {f for f in files if not f.startswith("pkg/__init__")}
    every = {p: RESOLVERS[os.path.splitext(p)[1]](p, text, tree) & changed for p, text in sources}
    scans = []
    words = dependents._WORD

    class Counting:
        def findall(self, text: str) -> list[str]:
            scans.append(len(text))
            return words.findall(text)

    monkeypatch.setattr(dependents, "_WORD", Counting())
    found = dependents.dependents_of(tree, changed, sources)
    assert {p for importers in found.on.values() for p in importers} == {p for p, hit in every.items() if hit}
    assert found.on["web/foo-bar.js"] == found.on["web/jquery.min.js"] == ["web/app.js"]
    assert found.on["pkg/snake_case.py"] == found.on["pkg/x2.py"] == ["pkg/user.py"]
    texts = [n for n in scans if n in {len(t) for _, t in sources}]
    assert len(texts) == len(sources)  # each text once, with 3,009 files changed
