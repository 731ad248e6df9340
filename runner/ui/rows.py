"""The rows a job's results are made of, by key, for ``runner diff``: every Markdown table of its
report, and every line of the files its task file declares as ``outputs`` (patterns of the job's
directory). Nothing here knows what a particular model writes: a row is a table row or a line, keyed
by its first column.

Guarantees:
- Pure where it can be: :func:`table_rows` and :func:`line_rows` take text and return rows.
- Confined to the job's directory: :func:`output_rows` walks it without following a symbolic link and
  opens each file beneath it (:func:`~runner.tools.beneath.open_regular`, no symbolic link on the
  way), so a link or a ``..`` leads nowhere; a pattern that is not a relative path of the directory
  (:func:`runner.jobs.output_pattern_problem`) is refused before anything is read.
- Bounded: a file is read up to :data:`MAX_OUTPUT_BYTES`, at most :data:`MAX_OUTPUT_FILES` files and
  :data:`MAX_TOTAL_BYTES` in all, the walk stops after :data:`MAX_WALKED` entries. What is cut or
  refused is said, naming the file, in ``problems``; its rows are left out.
"""

from __future__ import annotations

import errno
import fnmatch
import json
import os
import re
from pathlib import Path

from ..jobs import output_pattern_problem
from ..tools.beneath import NotRegular, Outside, Root, open_regular

MAX_OUTPUT_BYTES = 16 * 1024 * 1024  # one output file
MAX_TOTAL_BYTES = 256 * 1024 * 1024  # all of one job's output files
MAX_OUTPUT_FILES = 10_000
MAX_WALKED = 200_000  # directory entries looked at for one job
_HEADING = re.compile(r"^#{2,3} (.+?)\s*$")
_SEPARATOR = re.compile(r"^\|(\s*:?-{3,}:?\s*\|)+\s*$")
_FIRST_CELL = re.compile(r"^\|\s*((?:[^|\\]|\\.)*?)\s*\|")


def _unescape(cell: str) -> str:
    return cell.replace("\\|", "|").replace("\\n", "\n")


def unique_key(rows: dict[str, str], key: str, where: str) -> str:
    """``key``, or when taken ``key (where)``, then numbered."""
    if key not in rows:
        return key
    base = f"{key} ({where})" if where else key
    candidate, n = base, 1
    while candidate in rows:
        n += 1
        candidate = f"{base} ({n})"
    return candidate


def table_rows(text: str) -> dict[str, str]:
    """Every row of every Markdown table in ``text`` (a header, the row over a ``|---|`` line, and the
    separator left out), by its first cell: each row's whole line. A first cell met again is keyed
    ``cell (heading)`` by the ``##``/``###`` heading above it, then numbered. Pure."""
    rows: dict[str, str] = {}
    heading = ""
    lines = text.split("\n")
    for i, line in enumerate(lines):
        match = _HEADING.match(line)
        if match:
            heading = match[1]
            continue
        if not line.startswith("|") or _SEPARATOR.match(line):
            continue
        if i + 1 < len(lines) and _SEPARATOR.match(lines[i + 1]):
            continue  # a header
        cell = _FIRST_CELL.match(line)
        if cell:
            rows[unique_key(rows, _unescape(cell[1]), heading)] = line
    return rows


def line_key(line: str) -> str:
    """What a line of an output file is keyed by: the first element of a JSON array, the first cell of
    a Markdown table row, else the whole line."""
    if line.startswith("["):
        try:
            value = json.loads(line)
        except ValueError:
            value = None
        if isinstance(value, list) and value:
            first = value[0]
            return first if isinstance(first, str) else json.dumps(first, ensure_ascii=False)
    cell = _FIRST_CELL.match(line) if line.startswith("|") else None
    return _unescape(cell[1]) if cell else line


def line_rows(text: str, where: str = "", rows: dict[str, str] | None = None) -> dict[str, str]:
    """The rows of one output file added to ``rows``: each line not blank, not a ``#`` heading and not
    a table's header or separator, by :func:`line_key` (``key (where)`` when taken already). Pure."""
    out = rows if rows is not None else {}
    lines = text.split("\n")
    for i, line in enumerate(lines):
        if not line.strip() or line.startswith("#") or _SEPARATOR.match(line):
            continue
        if line.startswith("|") and i + 1 < len(lines) and _SEPARATOR.match(lines[i + 1]):
            continue
        out[unique_key(out, line_key(line), where)] = line
    return out


def matches(pattern: str, path: str) -> bool:
    """Whether the relative ``path`` matches ``pattern``: part by part with :func:`fnmatch.fnmatchcase`,
    a ``**`` part standing for any number of directories (none included)."""
    return _match(pattern.split("/"), path.split("/"))


def _match(pattern: list[str], parts: list[str]) -> bool:
    if not pattern:
        return not parts
    if pattern[0] == "**":
        return any(_match(pattern[1:], parts[i:]) for i in range(len(parts) + 1))
    return bool(parts) and fnmatch.fnmatchcase(parts[0], pattern[0]) and _match(pattern[1:], parts[1:])


def refusal(e: BaseException) -> str:
    """Why a file opened beneath its directory was not read, in a few words."""
    if isinstance(e, Outside):
        return "it leads out of its directory, not read"
    if isinstance(e, NotRegular):
        return "not a regular file, not read"
    if isinstance(e, OSError) and e.errno == errno.ELOOP:
        return "a symbolic link, which is not followed"
    return f"unreadable ({e.strerror if isinstance(e, OSError) and e.strerror else e})"


def matching_files(job_dir: Path, patterns: list[str], problems: list[str]) -> list[str]:
    """The files of ``job_dir`` (relative paths, sorted) that match any of ``patterns``, found without
    following a symbolic link; a refused pattern, a cut walk and the file cap said in ``problems``."""
    good = []
    for pattern in patterns:
        problem = output_pattern_problem(pattern) if isinstance(pattern, str) else "expected a string"
        if problem:
            problems.append(f"{job_dir}: output pattern {pattern!r}: {problem}; not read"[:300])
        else:
            good.append(pattern)
    found: list[str] = []
    walked = 0
    for top, dirs, files in os.walk(job_dir, followlinks=False):
        dirs.sort()
        walked += len(dirs) + len(files)
        here = os.path.relpath(top, job_dir)
        for name in sorted(files) + [d for d in dirs if os.path.islink(os.path.join(top, d))]:
            rel = name if here == "." else f"{here}/{name}"
            if any(matches(p, rel) for p in good):
                found.append(rel)
        if walked > MAX_WALKED or len(found) > MAX_OUTPUT_FILES:
            problems.append(
                f"{job_dir}: more than {MAX_WALKED} entries or {MAX_OUTPUT_FILES} output files; "
                "the outputs beyond them are left out"
            )
            break
    return sorted(found)[:MAX_OUTPUT_FILES]


def output_rows(job_dir: Path, patterns: list[str], problems: list[str]) -> dict[str, str]:
    """The rows of every file of ``job_dir`` matching ``patterns`` (:func:`line_rows`), files in path
    order, each opened beneath ``job_dir`` with no symbolic link on the way; what is refused or cut is
    said in ``problems``, naming the file, and its rows left out."""
    rows: dict[str, str] = {}
    if not patterns:
        return rows
    files = matching_files(job_dir, patterns, problems)
    total = 0
    try:
        root = Root.open(str(job_dir))
    except OSError as e:
        problems.append(f"{job_dir}: {refusal(e)}; its outputs are left out")
        return rows
    with root:
        for rel in files:
            path = job_dir / rel
            try:
                fd, st = open_regular(root, rel, no_symlinks=True)
            except (OSError, ValueError) as e:
                problems.append(f"{path}: {refusal(e)}; its rows are left out")
                continue
            with os.fdopen(fd, "rb") as f:
                if st.st_size > MAX_OUTPUT_BYTES:
                    problems.append(
                        f"{path}: {st.st_size} bytes, more than the {MAX_OUTPUT_BYTES} bytes read of an "
                        "output file; its rows are left out"
                    )
                    continue
                if total + st.st_size > MAX_TOTAL_BYTES:
                    problems.append(
                        f"{path}: past the {MAX_TOTAL_BYTES} bytes read of one job's outputs; "
                        "its rows are left out"
                    )
                    continue
                data = f.read(MAX_OUTPUT_BYTES + 1)
            if len(data) > MAX_OUTPUT_BYTES:  # it grew after its size was taken
                problems.append(f"{path}: more than {MAX_OUTPUT_BYTES} bytes; its rows are left out")
                continue
            total += len(data)
            line_rows(data.decode("utf-8", errors="replace"), rel, rows)
    return rows
