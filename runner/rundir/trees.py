"""Walking and removing a directory tree of any depth, for what meets trees it did not make: a run's
job directories (prune), a job's directory (its store on resume), a memory folder (a resume's rebuild).

A sandboxed ``bash`` makes a chain of directories as deep as it likes (``mkdir d && cd d`` in a loop),
deeper than a path can name. ``os.walk``, ``Path.rglob`` and ``shutil.rmtree`` recurse in Python on
3.11 (a ``RecursionError`` past 1,000 levels) and hold a descriptor per level; these do neither.

Guarantees:

- No recursion, and a bounded number of descriptors whatever the depth: :func:`walk` keeps one
  directory open at a time, :func:`remove_tree` two.
- Links are never followed: a link is listed (with its own ``lstat``) and removed as a link; what it
  points at is never touched.
- :func:`walk` never raises for what is beneath its top: an entry that vanishes or cannot be opened,
  or lies deeper than a path can name (``ENAMETOOLONG``), is left out.
- :func:`remove_tree` removes a tree of any depth, a path too long to name included: a directory's
  files are unlinked, its subdirectories moved up into the top directory (renamed beneath its
  descriptor, in one file system), and the emptied directory removed, so nothing is ever reached
  through a long path.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
from collections.abc import Iterator
from pathlib import Path

_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_TAKEN = frozenset({errno.EEXIST, errno.ENOTEMPTY, errno.EISDIR, errno.ENOTDIR})  # the spare name is used


def walk(top: Path) -> Iterator[tuple[Path, os.stat_result]]:
    """``(path, lstat)`` of every entry beneath ``top`` that is not a directory (files, links, ...), in
    no set order; directories are entered, never through a link."""
    stack = [top]
    while stack:
        here = stack.pop()
        try:
            with os.scandir(here) as entries:
                for entry in entries:
                    try:
                        st = entry.stat(follow_symlinks=False)
                    except OSError:
                        continue
                    if stat.S_ISDIR(st.st_mode):
                        stack.append(Path(entry.path))
                    else:
                        yield Path(entry.path), st
        except OSError:
            continue


def tree_bytes(top: Path) -> int:
    """The sizes of everything beneath ``top`` that is not a directory (a link counted as a link)."""
    return sum(st.st_size for _, st in walk(top))


def remove_tree(path: Path, *, ignore_errors: bool = False) -> None:
    """``path`` removed with everything beneath it (a link or a file: itself). Raises OSError as
    ``shutil.rmtree`` does (FileNotFoundError when there is nothing), unless ``ignore_errors``."""
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            os.unlink(path)
            return
        top = os.open(path, _DIR_FLAGS)
        try:
            _empty(top)
        finally:
            os.close(top)
        os.rmdir(path)
    except OSError:
        if not ignore_errors:
            raise


def _empty(top: int) -> None:
    """Everything in the directory ``top`` removed: a file or link unlinked; a directory's entries
    renamed up into ``top`` (to spare names), then the directory removed; until ``top`` is empty."""
    spare = itertools.count()
    while names := os.listdir(top):
        for name in names:
            try:
                mode = os.stat(name, dir_fd=top, follow_symlinks=False).st_mode
                if not stat.S_ISDIR(mode):
                    os.unlink(name, dir_fd=top)
                    continue
                sub = os.open(name, _DIR_FLAGS, dir_fd=top)
                try:
                    for child in os.listdir(sub):
                        _clear(sub, child, top, spare)
                finally:
                    os.close(sub)
                os.rmdir(name, dir_fd=top)
            except FileNotFoundError:
                continue  # gone meanwhile


def _clear(sub: int, child: str, top: int, spare: Iterator[int]) -> None:
    """``child`` of ``sub`` unlinked, or, a directory, renamed into ``top`` under the first spare name
    free for it (one that replaces an empty directory there is free: all of it goes)."""
    try:
        if not stat.S_ISDIR(os.stat(child, dir_fd=sub, follow_symlinks=False).st_mode):
            os.unlink(child, dir_fd=sub)
            return
    except FileNotFoundError:
        return  # gone meanwhile
    while True:
        try:
            os.rename(child, f".rm-{next(spare)}", src_dir_fd=sub, dst_dir_fd=top)
            return
        except OSError as e:
            if e.errno not in _TAKEN:
                raise
