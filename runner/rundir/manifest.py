"""A workspace manifest: what a job's workspace held when the job started, as ``manifest.jsonl``.

The file is one head line (:class:`Head`: the workspace, when, the counts, and the git commit and
dirty paths when the workspace is in a git repository: :mod:`runner.tools.git_state` reads them, in
the sandbox) and then one line per entry, sorted by path::

    {"manifest": 1, "workspace": "/src/app", "created": 1767225600.0, "entries": 3, ...}
    {"path": "a.py", "kind": "file", "size": 120, "sha256": "9f86..."}
    {"path": "docs", "kind": "symlink", "target": "../docs"}
    {"path": "queue", "kind": "unreadable", "error": "a FIFO, not a regular file"}

:func:`diff` compares two of them (added, changed, removed); it is pure.

Guarantees:
- The walk never leaves the workspace: every directory is opened ``O_NOFOLLOW | O_DIRECTORY``
  relative to its parent's descriptor and every file ``O_NOFOLLOW | O_NONBLOCK`` relative to its
  directory's, then checked with ``fstat`` to be the regular file the listing saw (a swap in between
  is recorded as unreadable). A symlink is recorded with its target, never followed; a FIFO, socket
  or device is never read (recorded as unreadable), nor is anything the process may not open.
- The walk is iterative (:func:`runner.rundir.trees.walk_beneath`: no recursion, a bounded number
  of descriptors). A tree more than :data:`MAX_DEPTH` directories deep has no manifest: :func:`build`
  raises :class:`~runner.rundir.trees.TooDeep` (an OSError), and the job runs in full, saying why.
- Contents are hashed streamed (sha256, a fixed buffer), whatever a file's size.
- The workspace's own ``.git`` (the repository's store, at its top) is left out; a ``.git`` below the
  top is content like any other directory (a workspace is no repository of its own there, and what it
  holds is what a tool there reads). Nothing here runs git (a repository's configuration can make git
  run commands): the caller fills :attr:`Manifest.git`.
- Reading never raises for a damaged file: :func:`read_manifest` returns None and the problem.
- Standard library only; blocking (callers run it off the event loop).
"""

from __future__ import annotations

import errno
import hashlib
import json
import os
import stat
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .trees import walk_beneath

VERSION = 1
CHUNK = 1 << 20  # bytes hashed per read
SKIPPED = frozenset({".git"})  # at the workspace's top only
MAX_DEPTH = 256  # directories below the top a manifest goes; a deeper tree: TooDeep, a full run
FILE, SYMLINK, UNREADABLE = "file", "symlink", "unreadable"
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_FILE_FLAGS = os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
_SPECIAL = {
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
}


@dataclass
class Manifest:
    """A workspace as it was: its head fields and its entries by relative path (``/``-separated)."""

    workspace: str
    created: float
    entries: dict[str, dict[str, Any]] = field(default_factory=dict)  # path -> its line (path included)
    git: dict[str, Any] | None = None  # {"commit": ..., "dirty": [...]}
    wall_s: float = 0.0

    @property
    def files(self) -> int:
        return sum(1 for e in self.entries.values() if e["kind"] == FILE)

    @property
    def bytes(self) -> int:
        return sum(e.get("size", 0) for e in self.entries.values() if e["kind"] == FILE)

    def head(self) -> dict[str, Any]:
        return {
            "manifest": VERSION,
            "workspace": self.workspace,
            "created": self.created,
            "entries": len(self.entries),
            "files": self.files,
            "bytes": self.bytes,
            "git": self.git,
            "wall_s": round(self.wall_s, 3),
        }

    def text(self) -> str:
        """``manifest.jsonl``: the head line, then one line per entry in path order."""
        lines = [json.dumps(self.head(), ensure_ascii=False)]
        lines += [json.dumps(self.entries[p], ensure_ascii=False) for p in sorted(self.entries)]
        return "\n".join(lines) + "\n"


@dataclass(frozen=True)
class Changes:
    """What differs between an older manifest and a newer one, each list sorted."""

    added: list[str]
    changed: list[str]
    removed: list[str]
    unchanged: int

    @property
    def total(self) -> int:
        return len(self.added) + len(self.changed) + len(self.removed)


def diff(old: Manifest, new: Manifest) -> Changes:
    """Entries only in ``new`` (added), only in ``old`` (removed), and in both with another kind, size,
    hash, link target or error (changed). Pure."""
    added = sorted(p for p in new.entries if p not in old.entries)
    removed = sorted(p for p in old.entries if p not in new.entries)
    both = [p for p in new.entries if p in old.entries]
    changed = sorted(p for p in both if _identity(old.entries[p]) != _identity(new.entries[p]))
    return Changes(added, changed, removed, len(both) - len(changed))


def _identity(entry: dict[str, Any]) -> tuple[Any, ...]:
    return entry.get("kind"), entry.get("size"), entry.get("sha256"), entry.get("target"), entry.get("error")


# --- making one --------------------------------------------------------------------------------


def _shown(name: str) -> str:
    """A file name as text: bytes that are not UTF-8 shown as ``\\xNN`` (stable, and JSON-writable)."""
    try:
        name.encode("utf-8")
        return name
    except UnicodeEncodeError:
        return os.fsencode(name).decode("utf-8", "backslashreplace")


def _hash(dir_fd: int, name: str, listed: os.stat_result) -> dict[str, Any]:
    """A regular file's size and sha256, opened beneath ``dir_fd``; or why it could not be read."""
    try:
        fd = os.open(name, _FILE_FLAGS, dir_fd=dir_fd)
    except OSError as e:
        return {"kind": UNREADABLE, "error": _error(e)}
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or (st.st_dev, st.st_ino) != (listed.st_dev, listed.st_ino):
            return {"kind": UNREADABLE, "error": "replaced while it was listed"}
        digest = hashlib.sha256()
        buffer = bytearray(CHUNK)
        view = memoryview(buffer)
        size = 0
        while n := os.readv(fd, [buffer]):
            digest.update(view[:n])
            size += n
        return {"kind": FILE, "size": size, "sha256": digest.hexdigest()}
    except OSError as e:
        return {"kind": UNREADABLE, "error": _error(e)}
    finally:
        os.close(fd)


def _error(e: OSError) -> str:
    code = errno.errorcode.get(e.errno or 0, "")
    return f"{code or type(e).__name__}: {e.strerror or e}"


def _walk(top: int, entries: dict[str, dict[str, Any]]) -> None:
    for found in walk_beneath(top, max_depth=MAX_DEPTH, skip=SKIPPED):
        path = found.dir + _shown(found.name)
        st = found.st
        if found.error is not None or st is None:  # an entry not looked at, a directory not entered
            key = path + "/" if st is not None else path
            error = found.error or OSError(errno.EIO, "could not be looked at")
            entries[key] = {"path": key, "kind": UNREADABLE, "error": _error(error)}
            continue
        mode = st.st_mode
        if stat.S_ISDIR(mode):
            continue  # its entries are the manifest's
        if stat.S_ISREG(mode):
            entries[path] = {"path": path, **_hash(found.dir_fd, found.name, st)}
        elif stat.S_ISLNK(mode):
            try:
                target = _shown(os.readlink(found.name, dir_fd=found.dir_fd))
                entries[path] = {"path": path, "kind": SYMLINK, "target": target}
            except OSError as e:
                entries[path] = {"path": path, "kind": UNREADABLE, "error": _error(e)}
        else:
            kind = _SPECIAL.get(stat.S_IFMT(mode), "a special file")
            entries[path] = {"path": path, "kind": UNREADABLE, "error": f"{kind}, not a regular file"}


def build(workspace: Path) -> Manifest:
    """The manifest of ``workspace`` now, without its git record (blocking: run it off the event loop).
    OSError when the workspace itself cannot be opened as a directory; :class:`TooDeep` when it is
    more than :data:`MAX_DEPTH` directories deep."""
    started = time.monotonic()
    manifest = Manifest(workspace=str(workspace), created=round(time.time(), 3))
    fd = os.open(workspace, _DIR_FLAGS)
    try:
        _walk(fd, manifest.entries)
    finally:
        os.close(fd)
    manifest.wall_s = time.monotonic() - started
    return manifest


# --- reading one -------------------------------------------------------------------------------


def read_manifest(path: Path) -> tuple[Manifest | None, str | None]:
    """The manifest at ``path``, or None and why it cannot be used (missing, damaged, truncated)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None, f"{path}: missing"
    except (OSError, ValueError) as e:
        return None, f"{path}: unreadable ({type(e).__name__})"
    lines = text.split("\n")
    if not text.endswith("\n"):
        return None, f"{path}: truncated (no newline at its end)"
    try:
        head = json.loads(lines[0])
        rows = [json.loads(line) for line in lines[1:-1]]
    except ValueError as e:
        return None, f"{path}: damaged ({str(e)[:60]})"
    if not isinstance(head, dict) or head.get("manifest") != VERSION:
        return None, f"{path}: line 1: not a manifest head of version {VERSION}"
    entries: dict[str, dict[str, Any]] = {}
    for n, row in enumerate(rows, start=2):
        if (
            not isinstance(row, dict)
            or not isinstance(row.get("path"), str)
            or row.get("kind") not in (FILE, SYMLINK, UNREADABLE)
        ):
            return None, f"{path}: line {n}: not a manifest entry"
        entries[row["path"]] = row
    if head.get("entries") != len(entries):
        return None, f"{path}: its head counts {head.get('entries')!r} entries, it holds {len(entries)}"
    created = head.get("created")
    git = head.get("git")
    return Manifest(
        workspace=str(head.get("workspace", "")),
        entries=entries,
        created=float(created) if isinstance(created, (int, float)) else 0.0,
        git=git if isinstance(git, dict) else None,
        wall_s=float(head.get("wall_s") or 0.0),
    ), None
