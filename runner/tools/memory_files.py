"""The memory folder's names, limits and listing, without the tool: what the compactor, the viewer, a
resumed or incremental job need to know about ``memories/`` (standard library only, so none of them
imports the SDK or the tool's code).

Guarantees:

- :func:`files` and :func:`memory_files` list only beneath ``memories/``: every directory is opened
  from a descriptor of its parent (:mod:`runner.tools.beneath`), links are never followed (a link is
  neither listed nor walked), hidden names are left out.
- :func:`tally` counts everything beneath the folder, hidden names and directories included (what
  the memory tool's caps are checked against), without recursion; the tool walks the folder once a
  job and keeps its :class:`Tally` up to date from what each write changed.
- :func:`chain` looks only at the directories on a path beneath the folder, never following a link.
- :func:`memory_files` never raises for a job without memories (or whose ``memories`` is a link):
  it returns an empty list.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from dataclasses import dataclass

from .beneath import Root, open_beneath

MEMORY_DIR = "memories"
PREFIX = "/memories"
MAX_FILE_BYTES = 256 * 1024
MAX_TOTAL_BYTES = 4 * 1024 * 1024
MAX_DEPTH = 16  # components of a memory path (the folder's walkers, prune and resume never meet deep trees)
_SUBDIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
WRITES = frozenset({"create", "str_replace", "insert", "delete", "rename"})  # the commands that change memory


def split_lines(content: str) -> list[str]:
    """A memory file's lines (a trailing newline ends the last line; it does not start another)."""
    if not content:
        return []
    return content[:-1].split("\n") if content.endswith("\n") else content.split("\n")


def files(root: Root, rel: str = ".", depth: int = 100) -> list[tuple[str, int]]:
    """``(path relative to rel, size)`` of the regular files (and, with a trailing ``/``, the
    directories) beneath ``rel``, sorted, hidden names left out, links not followed."""
    out: list[tuple[str, int]] = []

    def walk(fd: int, prefix: str, level: int) -> None:
        for name in sorted(os.listdir(fd)):
            if name.startswith("."):
                continue
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                continue
            if stat.S_ISREG(st.st_mode):
                out.append((prefix + name, st.st_size))
            elif stat.S_ISDIR(st.st_mode):
                out.append((prefix + name + "/", 0))
                if level < depth:
                    try:
                        sub = os.open(name, _SUBDIR_FLAGS, dir_fd=fd)
                    except OSError:
                        continue
                    try:
                        walk(sub, prefix + name + "/", level + 1)
                    finally:
                        os.close(sub)

    top = open_beneath(root, rel, os.O_RDONLY | os.O_DIRECTORY)
    try:
        walk(top, "", 1)
    finally:
        os.close(top)
    return out


def entries(root: Root, rel: str = ".") -> Iterator[tuple[int, os.stat_result]]:
    """``(level, lstat)`` of every entry beneath the directory ``rel`` (level 1: its own entries),
    hidden names and directories included, links not followed. Walked with a stack of paths, not
    recursion, one directory open at a time; an entry that vanishes or cannot be opened is left out."""
    stack = [(rel, 0)]
    while stack:
        here, level = stack.pop()
        try:
            fd = open_beneath(root, here, os.O_RDONLY | os.O_DIRECTORY, no_symlinks=True)
        except (OSError, ValueError):
            continue
        try:
            for name in os.listdir(fd):
                try:
                    st = os.stat(name, dir_fd=fd, follow_symlinks=False)
                except OSError:
                    continue
                yield level + 1, st
                if stat.S_ISDIR(st.st_mode):
                    stack.append((name if here == "." else f"{here}/{name}", level + 1))
        except OSError:
            pass
        finally:
            os.close(fd)


@dataclass
class Tally:
    """What the folder holds: its bytes (``lstat`` sizes) and entries (files, directories, links),
    hidden names included, the folder itself not."""

    bytes: int = 0
    entries: int = 0


def tally(root: Root) -> Tally:
    """One walk of everything beneath ``root``: a :class:`Tally` of it."""
    found = Tally()
    for _, st in entries(root):
        found.bytes += st.st_size
        found.entries += 1
    return found


def chain(root: Root, rel: str) -> dict[str, int]:
    """``{prefix: lstat size}`` of the directories on the way to ``rel`` (its proper prefixes: for
    ``a/b/c.md``, ``a`` and ``a/b``; the folder itself not), as far as they exist and are directories:
    each looked at from its parent's descriptor, never through a link."""
    parts = rel.split("/")[:-1] if rel != "." else []
    sizes: dict[str, int] = {}
    fd = root.fd
    try:
        for k, name in enumerate(parts):
            try:
                st = os.stat(name, dir_fd=fd, follow_symlinks=False)
            except OSError:
                break
            if not stat.S_ISDIR(st.st_mode):
                break
            sizes["/".join(parts[: k + 1])] = st.st_size
            if k + 1 == len(parts):
                break
            try:
                sub = os.open(name, _SUBDIR_FLAGS, dir_fd=fd)
            except OSError:
                break
            if fd != root.fd:
                os.close(fd)
            fd = sub
    finally:
        if fd != root.fd:
            os.close(fd)
    return sizes


def levels(root: Root, rel: str) -> int:
    """How many levels of entries the directory at ``rel`` holds (0 for a file, a link, nothing or an
    empty directory)."""
    return max((level for level, _ in entries(root, rel)), default=0)


def memory_files(job_dir: str) -> list[tuple[str, int]]:
    """The job's memory files (``/memories/...`` path, bytes), for the index after a compaction and
    the viewer; empty when there are none. Never follows a link out."""
    try:
        with Root.open(job_dir) as job:
            fd = open_beneath(job, MEMORY_DIR, os.O_RDONLY | os.O_DIRECTORY, no_symlinks=True)
            with Root(fd, os.path.join(job.real, MEMORY_DIR)) as root:
                return [(f"{PREFIX}/{p}", size) for p, size in files(root) if not p.endswith("/")]
    except OSError:
        return []
