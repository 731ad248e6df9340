"""The ``grep`` tool's search, in a process of its own: :func:`serve`, a kept worker of
:mod:`runner.tools.grep_pool`, answers one JSON line per request (JSON lines) until its stdin closes.

A model-chosen regular expression can take exponential time (``(a+)+$``) and Python's ``re`` holds
the GIL while it runs: in the runner's process it would stall every job. Here it stalls only this
process, which the runner kills at the call's deadline (:mod:`runner.tools.grep`).

Guarantees:

- It reads only beneath the workspace: the search root is opened beneath the workspace's directory
  descriptor, and every directory and file beneath it by descriptor, with no symlink followed on the
  way (:mod:`runner.tools.beneath`); a symlinked file or directory is skipped, as the SDK's walk skipped it.
- Its output is the SDK's: ``<path>:<line number>:<line>`` per matching line, ``no matches``, files
  with a NUL byte in their first 512 skipped, at most 100 KiB of output (then ``[output truncated at
  102400 bytes]``), ``.git`` and ``node_modules`` not searched, the walk stopped after ``max_files``
  files (``"cut": true`` in the answer). One addition: a line over 2,000 bytes, which the SDK's grep
  skips, is searched in its first :data:`LONG_LINE_SEARCH` bytes, and when it matches it is shown in
  its place cut to about :data:`EXCERPT_CHARS` characters around its first match, saying so
  (``<path>:<line number>:... excerpt ... [line of N bytes, cut around the match]``): a matching line
  is never dropped without a word, and a line of 2,000 bytes or fewer is shown as before. The path
  is shown as :func:`runner.tools.beneath.shown` makes it (a byte that is not text or a control
  character as ``\\xNN``, a backslash as ``\\\\``), and a ``path`` given is read back with
  :func:`runner.tools.beneath.from_shown`: a path a search showed searches that very file.
- Its memory stays small whatever the files hold: a line is read at most ``LONG_LINE_SEARCH`` bytes at
  a time (the rest of an over-long one, even a 1 GiB sparse file with no newline, is read past in 1 MiB
  pieces), and a worker without an address-space limit gets one of 1 GiB (``RLIMIT_AS``, set by
  :func:`serve`).
- It dies with the runner (``PR_SET_PDEATHSIG``), and when one request has used ``cpu_s`` seconds
  of CPU (``RLIMIT_CPU``, moved on before each request), whatever the runner does; a kept worker
  also exits after 30 s without a request.

Request: ``{"workspace", "path" (or null), "pattern", "max_files", "cpu_s"}``. Answer:
``{"text", "cut"}`` or ``{"error"}``.
"""

from __future__ import annotations

import ctypes
import json
import os
import re
import resource
import select
import signal
import stat
import sys
from collections.abc import Iterator
from contextlib import suppress
from typing import Any, BinaryIO

from .beneath import (
    PATH_MAX,
    BadPath,
    Outside,
    Root,
    fd_path,
    from_shown,
    open_beneath,
    open_regular,
    relative,
    shown,
)

OUTPUT_LIMIT = 100 * 1024
MAX_LINE_LENGTH = 2000
LONG_LINE_SEARCH = 1 << 20  # of a line over MAX_LINE_LENGTH, the bytes searched (the rest is not)
EXCERPT_CHARS = 200  # a matching long line is shown cut to about this many characters around its match
SKIP_CHUNK = 1 << 20  # the rest of an over-long line is read past in pieces of this size
SKIPPED_DIRS = (".git", "node_modules")
ADDRESS_SPACE = 1 << 30  # RLIMIT_AS of a worker that has none: its lines, walk and output need a few MiB
PR_SET_PDEATHSIG = 1


class _Full(Exception):
    """The output reached its limit."""


def _lines(f: BinaryIO) -> Iterator[tuple[bytes, int]]:
    """Each line of ``f`` (its newline kept) and its size in bytes; of a line longer than
    :data:`MAX_LINE_LENGTH` bytes, its first :data:`LONG_LINE_SEARCH` bytes only: never more than that
    of a line in memory, the rest of a long one read past in :data:`SKIP_CHUNK` pieces (a 1 GiB line
    without a newline costs 2 MiB, not 1 GiB)."""
    while raw := f.readline(MAX_LINE_LENGTH + 1):
        if len(raw) <= MAX_LINE_LENGTH or raw.endswith(b"\n"):
            yield raw, len(raw)
            continue
        raw += f.readline(LONG_LINE_SEARCH - len(raw))
        size = len(raw)
        if not raw.endswith(b"\n"):
            size += _skip_line(f)
        yield raw, size


def _skip_line(f: BinaryIO) -> int:
    """Past the next newline of ``f`` (a regular file: it can seek back), or to its end; the bytes
    passed."""
    passed = 0
    while chunk := f.read(SKIP_CHUNK):
        newline = chunk.find(b"\n")
        if newline >= 0:
            f.seek(newline + 1 - len(chunk), os.SEEK_CUR)
            return passed + newline + 1
        passed += len(chunk)
    return passed


def excerpt(line: str, match: re.Match[str], size: int) -> str:
    """A long matching line as shown: about :data:`EXCERPT_CHARS` characters around its first match,
    the cuts marked, and the line's size."""
    start = max(0, match.start() - EXCERPT_CHARS // 4)
    end = min(len(line), max(match.end(), start + EXCERPT_CHARS))
    shown = line[start:end]
    return (
        f"{'...' if start else ''}{shown}{'...' if end < len(line) else ''}"
        f" [line of {size:,} bytes, cut around the match]"
    )


class _Search:
    def __init__(self, rx: re.Pattern[str]):
        self.rx = rx
        self.hits: list[str] = []
        self.budget = OUTPUT_LIMIT

    def push(self, line: str) -> None:
        self.budget -= len(line) + 1
        if self.budget < 0:
            self.hits.append(f"[output truncated at {OUTPUT_LIMIT} bytes]")
            raise _Full
        self.hits.append(line)

    def scan(self, fd: int, shown: str) -> None:
        with os.fdopen(fd, "rb") as f:
            if b"\x00" in f.read(512):
                return
            f.seek(0)
            for i, (raw, size) in enumerate(_lines(f), 1):
                line = raw.decode(errors="replace").rstrip("\r\n")
                if match := self.rx.search(line):
                    text = line if size <= MAX_LINE_LENGTH else excerpt(line, match, size)
                    self.push(f"{shown}:{i}:{text}")

    def walk(self, root: Root, max_files: int) -> bool:
        """Search every regular file beneath ``root`` in ``os.walk``'s order; True when the walk stopped
        at ``max_files``."""
        seen = 0
        stack = ["."]
        while stack:
            files, dirs = _listing(root, stack.pop())
            for rel in files:
                seen += 1
                if seen > max_files:
                    return True
                self.scan_beneath(root, rel)
            stack.extend(reversed(dirs))
        return False

    def scan_beneath(self, root: Root, rel: str) -> None:
        """Search the regular file ``rel`` beneath ``root``; nothing for one that cannot be opened or read."""
        try:
            opened, _ = open_regular(root, rel, no_symlinks=True)
        except (OSError, ValueError):
            return
        with suppress(OSError):
            self.scan(opened, shown(f"{root.real}/{rel}"))


def _listing(root: Root, here: str) -> tuple[list[str], list[str]]:
    """The regular files and the directories to enter (not :data:`SKIPPED_DIRS`) in the directory
    ``here`` beneath ``root``, as paths relative to it, in the directory's order; no symlinks, nothing
    too deep for a path to name; empty for a directory that cannot be opened."""
    files: list[str] = []
    dirs: list[str] = []
    try:
        fd = open_beneath(root, here, os.O_RDONLY | os.O_DIRECTORY, no_symlinks=True)
    except (OSError, ValueError):
        return files, dirs
    try:
        with os.scandir(fd) as it:
            for entry in it:
                _sort_entry(entry, here, files, dirs=dirs)
    except OSError:
        pass
    finally:
        os.close(fd)
    return files, dirs


def _sort_entry(entry: os.DirEntry[str], here: str, files: list[str], *, dirs: list[str]) -> None:
    """``entry`` of the directory ``here`` added to ``files`` or ``dirs`` (or to neither)."""
    try:
        if entry.is_symlink():
            return
        rel = entry.name if here == "." else f"{here}/{entry.name}"
        if len(os.fsencode(rel)) >= PATH_MAX - 1:
            return  # deeper than a path can name: skipped, not a failure
        if entry.is_dir(follow_symlinks=False):
            if entry.name not in SKIPPED_DIRS:
                dirs.append(rel)
        elif entry.is_file(follow_symlinks=False):
            files.append(rel)
    except OSError:
        return


def grep(request: dict[str, Any]) -> dict[str, Any]:
    pattern, path = request["pattern"], request.get("path")
    try:
        rx = re.compile(pattern)
    except (re.error, OverflowError, RecursionError, ValueError) as e:
        return {"error": f"grep: invalid regex: {e}"}
    search = _Search(rx)
    cut = False
    with Root.open_exact(request["workspace"]) as top:
        try:
            rel = relative(from_shown(path), top.real, request["workspace"]) if path else "."
            probe = open_beneath(top, rel, os.O_PATH)
        except Outside:
            return {"error": f"grep: path {path!r} is outside the session's working directory"}
        except BadPath as e:
            return {"error": f"grep: path {path!r} {e}"}
        except FileNotFoundError:
            return {"error": f"grep: {path}: no such file or directory"}
        except OSError as e:
            return {"error": f"grep: {path}: {(e.strerror or 'i/o error').lower()}"}
        try:
            mode = os.fstat(probe).st_mode
        finally:
            os.close(probe)
        with suppress(_Full, OSError):  # a full output ends the search; a file that cannot be read is skipped
            if stat.S_ISDIR(mode):
                with top.sub(rel) as root:
                    cut = search.walk(root, int(request["max_files"]))
            elif stat.S_ISREG(mode):
                fd, _ = open_regular(top, rel)
                search.scan(fd, shown(fd_path(fd) or os.path.normpath(os.path.join(top.real, rel))))
    return {"text": "\n".join(search.hits) if search.hits else "no matches", "cut": cut}


def _die_with_parent() -> None:
    with suppress(OSError, AttributeError):
        libc = ctypes.CDLL(None, use_errno=True)
        libc.prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)
    if os.getppid() == 1:
        sys.exit(1)  # the runner is already gone


def _cpu_cap(cpu_s: float) -> None:
    """At most ``cpu_s`` more seconds of CPU from now (then SIGXCPU ends the process). Only the soft
    limit moves: an unprivileged kept worker could not raise a hard one again for its next request."""
    used = resource.getrusage(resource.RUSAGE_SELF)
    soft = int(used.ru_utime + used.ru_stime) + max(1, int(cpu_s)) + 1
    with suppress(ValueError, OSError):
        _, hard = resource.getrlimit(resource.RLIMIT_CPU)
        resource.setrlimit(
            resource.RLIMIT_CPU, (soft if hard == resource.RLIM_INFINITY else min(soft, hard), hard)
        )


def _memory_cap(most: int = ADDRESS_SPACE) -> None:
    """At most ``most`` bytes of address space (``RLIMIT_AS``) when the worker has no limit of its own:
    past it an allocation fails (a MemoryError, answered as an error) instead of growing without end."""
    with suppress(ValueError, OSError):
        soft, hard = resource.getrlimit(resource.RLIMIT_AS)
        if soft == resource.RLIM_INFINITY:
            resource.setrlimit(
                resource.RLIMIT_AS, (most if hard == resource.RLIM_INFINITY else min(most, hard), hard)
            )


def answer(line: bytes) -> bytes:
    """One request (a JSON line) answered (a JSON line), under its CPU cap."""
    try:
        request = json.loads(line)
        _cpu_cap(float(request.get("cpu_s", 120)))
        found = grep(request)
    except Exception as e:  # reported, not a traceback the runner has to parse
        found = {"error": f"grep failed: {type(e).__name__}: {e}"}
    return json.dumps(found).encode() + b"\n"


def serve(idle_s: float = 30.0) -> None:
    """Requests, one JSON line each, answered in order until stdin closes or stays idle ``idle_s``
    seconds (a kept worker of :mod:`runner.tools.grep_pool`)."""
    _die_with_parent()
    _memory_cap()
    stdin, stdout = sys.stdin.buffer, sys.stdout.buffer
    while select.select([stdin], [], [], idle_s)[0]:
        line = stdin.readline()
        if not line:
            return
        stdout.write(answer(line))
        stdout.flush()
