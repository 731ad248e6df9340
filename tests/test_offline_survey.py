"""The offline policy against ground truth, over real trees and a grid of limits.

Trees: ``encodings`` (a flat package of 120 modules whose ``__pycache__`` alone overflows one
glob listing), ``idlelib`` (nested: ``idle_test/``, ``Icons/`` with binary files, 115 TODO lines),
``email`` (nested: ``mime/``) and ``pip`` (nearly 500 modules in 70 directories). Ground truth is
computed independently: every file under the tree that is not in ``__pycache__`` and is text (no
NUL byte, valid UTF-8), and every TODO/FIXME/XXX line a plain ``grep -rnIE`` finds.

The property: a survey that ends ``succeeded`` names every regular file (``__pycache__`` too) with
its right line count, or as binary with its size, and every TODO place, in its report or the memory
files the report names. A survey that cannot keep what it learned inside its limits ends otherwise
(``stuck``, ``max_turns``), never ``succeeded`` with a partial report; the cells in ``MUST_SUCCEED``
succeed.
"""

from __future__ import annotations

import email
import encodings
import os
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from conftest import expected_row, offline_survey, regular_files, survey_rows, survey_todos

from runner.offline.memory_survey import FILES_ONLY, TODO_PATTERN, TODO_SHOWN, UNIT_SEP, scoped_prompt
from runner.tools.grep_worker import excerpt

pytestmark = [pytest.mark.anyio, pytest.mark.stand_in]
STDLIB = Path(encodings.__file__).parent.parent
TREES = {
    "encodings": STDLIB / "encodings",
    "idlelib": STDLIB / "idlelib",
    "email": Path(email.__file__).parent,
}
try:
    import pip

    TREES["pip"] = Path(pip.__file__).parent
except ImportError:  # pragma: no cover - every virtualenv has pip
    pass
LIMITS = {  # max_turns raised: a survey reads a few files a turn, so a tree of 500 takes 200-500 turns
    "default": {"max_turns": 1_000},
    "tight": {
        "context_char_limit": 30_000,
        "batch_char_limit": 30_000,
        "large_result_chars": 8_000,
        "max_turns": 1_000,
    },
    "very-tight": {
        "context_char_limit": 15_000,
        "batch_char_limit": 15_000,
        "large_result_chars": 4_000,
        "max_turns": 1_000,
    },
}
# In a 15,000-char context the survey's own state note (about 2,000 chars a turn) and the summary leave
# room for two or three reads a turn: the surveys of the trees with a few hundred files (encodings'
# __pycache__, idlelib, pip) there may end stuck (thrashing), never succeed with a partial report.
MUST_SUCCEED = {(tree, limits) for tree in TREES for limits in LIMITS} - {
    ("pip", "very-tight"),
    ("idlelib", "very-tight"),
    ("encodings", "very-tight"),
}


def text_files(root: Path) -> set[str]:
    found = set()
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames[:] = [d for d in dirnames if d != "__pycache__"]
        for name in filenames:
            data = (Path(dirpath) / name).read_bytes()
            try:
                data.decode("utf-8")
            except UnicodeDecodeError:
                continue
            if b"\0" not in data:
                found.add(str((Path(dirpath) / name).relative_to(root)))
    return found


def todo_lines(root: Path) -> set[str]:
    done = subprocess.run(
        ["grep", "-rnIE", r"\b(TODO|FIXME|XXX)\b", "--exclude-dir=__pycache__", "."],
        cwd=root,
        capture_output=True,
        text=True,
        errors="replace",
    )
    return {":".join(line[2:].split(":", 2)[:2]) for line in done.stdout.splitlines()}  # path:line


@pytest.mark.parametrize("limits", list(LIMITS))
@pytest.mark.parametrize("tree", list(TREES))
async def test_a_survey_that_succeeds_is_complete(tree, limits, tmp_path):
    root = TREES[tree]
    result, report = await offline_survey(root, tmp_path / "job", LIMITS[limits])
    status = result.status
    assert status in ("succeeded", "stuck", "max_turns"), status
    if (tree, limits) in MUST_SUCCEED:
        assert status == "succeeded"
    if status == "succeeded":
        check_complete(root, report, tmp_path / "job")


@pytest.mark.skipif("pip" not in TREES, reason="pip is not installed")
async def test_a_big_tree_at_a_long_path_is_surveyed_whole(tmp_path):
    """The workspace's absolute path is in every glob and grep result: a 150-character one must not
    cost the survey its notes (pip's listing and file facts at the default limits)."""
    root = tmp_path / ("w" * 150) / "pip"
    shutil.copytree(TREES["pip"], root, ignore=shutil.ignore_patterns("__pycache__"))
    result, report = await offline_survey(root, tmp_path / "job", {"max_turns": 1_000})
    status = result.status
    assert status == "succeeded"
    check_complete(root, report, tmp_path / "job")


def check_complete(root: Path, report: str, job: Path) -> None:
    rows = survey_rows(report, job)
    files = regular_files(root)
    assert set(files) <= set(rows), sorted(set(files) - set(rows))[:10]
    for path, data in files.items():  # every file with its right line count, or binary with its size
        kind, n = expected_row(data)
        row = rows[path]
        assert (row[1] if row[1] != "image" else "binary", row[2]) == (kind, n), (path, row)
    for path in text_files(root):
        assert rows[path][1] == "text", path
    todos = todo_lines(root)
    found = survey_todos(report, job)
    assert todos <= found, sorted(todos - found)[:10]
    count = int(re.search(r"## TODO / FIXME / XXX \((\d+) lines", report).group(1))
    assert count == len(todos)


def todo_places(files: dict[str, bytes]) -> set[str]:
    """Ground truth as the grep tool searches: every ``path:line`` of a TODO line (no file with a NUL in
    its first 512 bytes; a line over 2,000 bytes searched in its first MiB)."""
    rx = re.compile(TODO_PATTERN)
    found = set()
    for path, data in files.items():
        if b"\x00" in data[:512]:
            continue
        for k, raw in enumerate(data.split(b"\n")):
            text = raw[: 1 << 20].decode(errors="replace").rstrip("\r")
            if rx.search(text):
                found.add(f"{path}:{k + 1}")
    return found


async def test_every_todo_line_of_a_tree_whose_one_search_would_be_cut(tmp_path):
    """4,800 TODO lines (a search of the whole tree gives over 400 KB, cut at the grep tool's 100 KiB),
    one in a file too big for one read, one in a Latin-1 text file the read refuses as not UTF-8, two on
    lines over 2,000 bytes (one in a file read whole, one at the end of the big file), and none counted
    in a binary file: the report counts every line the grep tool would find, says nothing was cut, and
    shows the first ones with their text."""
    root = tmp_path / "ws"
    for k in range(120):
        body = "".join(f"x = {n}  # TODO: item {n} of file {k}, a line of some length\n" for n in range(40))
        (root / f"pkg{k % 6}").mkdir(parents=True, exist_ok=True)
        (root / f"pkg{k % 6}" / f"mod{k:03d}.py").write_text('"""A module."""\n' + body)
    long_line = "z = '" + "x" * 2_500 + "'  # FIXME: the end of a long line\n"
    (root / "big.py").write_text("y = 1\n" * 60_000 + "# FIXME: the end of a big file\n" + long_line)
    (root / "long.js").write_text("var d = '" + "x" * 2_500 + "'; // TODO: long\nvar y = 1;\n")
    (root / "notes.txt").write_bytes("caf\xe9: XXX one Latin-1 line\n".encode("latin-1"))
    (root / "blob.bin").write_bytes(b"\x00\x01TODO not text\n")
    result, report = await offline_survey(root, tmp_path / "job", {"max_turns": 2_000})
    assert result.status == "succeeded"
    truth = todo_places(regular_files(root))
    assert len(truth) == 120 * 40 + 4
    assert {"big.py:60001", "big.py:60002", "long.js:1", "notes.txt:1"} <= truth
    head = re.search(r"## TODO / FIXME / XXX \((\d+) lines in (\d+) files(.*)\)", report)
    assert head and int(head[1]) == len(truth) and int(head[2]) == 123 and "cut" not in head[3], head
    assert survey_todos(report, tmp_path / "job") == truth
    shown = re.findall(r"^- `([^`]+?):(\d+): (.*)`$", report, re.M)
    assert len(shown) == TODO_SHOWN
    for path, number, text in shown:
        line = (root / path).read_bytes().split(b"\n")[int(number) - 1].decode(errors="replace")
        if len(line.encode()) + 1 > 2_000:  # as the grep tool shows it: cut around its match
            line = excerpt(line, re.search(TODO_PATTERN, line), len(line.encode()) + 1)
            assert line.endswith(" bytes, cut around the match]"), line
        assert text == line.strip()[:100]
    assert ("long.js", "1") in {(path, number) for path, number, _ in shown}


async def test_a_parts_todo_lines_are_every_one_when_its_directorys_search_would_be_cut(tmp_path):
    """A subagent's part: a directory whose one search gives over 100 KiB (1,600 TODO lines, cut) and
    the files directly in another (no tree search covers them): every line of the part, none of the rest."""
    root = tmp_path / "ws"
    for k in range(40):
        body = "".join(f"x = {n}  # TODO: item {n} of file {k}, a line of some length\n" for n in range(40))
        (root / "big" / f"sub{k % 4}").mkdir(parents=True, exist_ok=True)
        (root / "big" / f"sub{k % 4}" / f"m{k:02d}.py").write_text(body)
    (root / "own" / "deeper").mkdir(parents=True)
    (root / "own" / "a.py").write_text("# FIXME: one\n")
    (root / "own" / "deeper" / "b.py").write_text("# TODO: not this part's\n")
    (root / "other.py").write_text("# XXX: not this part's either\n")
    scope = UNIT_SEP.join(["big", "own" + FILES_ONLY])
    prompt = scoped_prompt(scope, "Survey this package.")
    result, report = await offline_survey(root, tmp_path / "job", {"max_turns": 2_000}, prompt=prompt)
    assert result.status == "succeeded"
    files = regular_files(root)
    truth = todo_places({p: d for p, d in files.items() if p.startswith("big/") or p == "own/a.py"})
    assert len(truth) == 40 * 40 + 1
    head = re.search(r"## TODO / FIXME / XXX \((\d+) lines in (\d+) files(.*)\)", report)
    assert head and int(head[1]) == len(truth) and int(head[2]) == 41 and "cut" not in head[3], head
    assert survey_todos(report, tmp_path / "job") == truth


async def test_a_survey_stopped_before_it_read_its_todo_text_back_says_so(tmp_path):
    """Stopped at ``max_turns`` in its read phase, the survey has found idlelib's TODO lines but not yet
    read their text back: the partial report gives their count and where every place is, and says that
    none is shown (never "(none)", which would say there are none)."""
    result, report = await offline_survey(TREES["idlelib"], tmp_path / "job", {"max_turns": 30})
    assert result.status == "max_turns"
    section = report.split("## TODO / FIXME / XXX", 1)[1].split("\n## ", 1)[0]
    hits = int(re.match(r" \((\d+) lines in \d+ files", section)[1])
    assert hits > 0 and "(none)" not in section
    none_shown = "- ... none is shown (the survey stopped before it read their text back); every line's place"
    assert none_shown in section
    assert len(survey_todos(report, tmp_path / "job")) == hits  # every place is in the todo files it names
