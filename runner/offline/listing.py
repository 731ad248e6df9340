"""How the offline policy lists a whole workspace with a glob that shows at most 200 matches.

It asks ``*`` and ``**/*`` of the workspace first. When the tool says the ``**/*`` listing was cut
(:func:`runner.offline.readback.glob_cut`), it narrows per directory: ``*/`` gives a directory's
subdirectories and ``*`` its own entries, for every directory it finds; a directory with more than
200 entries of its own is split by the first characters of the names (``[a-f]*``, ``[g-m]*``, ...). Every
query is answered whole (a saved answer is read back page by page), so the listing is complete when no query
is left.

Pure: answers in, the next queries and the files out. ``__pycache__`` (and other tool directories)
and binary files by extension are left out.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field

SKIP_DIRS = frozenset(
    {
        "__pycache__",
        ".git",
        ".hg",
        ".svn",
        "node_modules",
        ".mypy_cache",
        ".pytest_cache",
        ".ruff_cache",
        ".tox",
        ".venv",
    }
)
BINARY_EXTENSIONS = frozenset(
    {
        ".pyc",
        ".pyo",
        ".pyd",
        ".so",
        ".o",
        ".a",
        ".dll",
        ".dylib",
        ".exe",
        ".bin",
        ".class",
        ".jar",
        ".whl",
        ".egg",
        ".zip",
        ".gz",
        ".bz2",
        ".xz",
        ".tar",
        ".tgz",
        ".7z",
        ".png",
        ".jpg",
        ".jpeg",
        ".gif",
        ".bmp",
        ".ico",
        ".webp",
        ".pdf",
        ".woff",
        ".woff2",
        ".ttf",
        ".otf",
        ".db",
        ".sqlite",
        ".pickle",
        ".pkl",
        ".npy",
        ".npz",
        ".mo",
        ".wav",
        ".mp3",
        ".mp4",
    }
)
FIRST = ("*", "**/*")  # the first queries, at the workspace root (``*`` first: it gives the root)
# digits in two halves: a directory of numbered names (``0001_initial.py``, ``user_123.py``) narrows too
NAME_CLASSES = ("[a-f]", "[g-m]", "[n-s]", "[t-z]", "[A-Z]", "[0-4]", "[5-9]", "[!a-zA-Z0-9]")


def rel(root: str | None, path: str) -> str:
    """``path`` relative to ``root`` ('.' for the root itself); a path outside it as it is."""
    if root and (path == root or path.startswith(root.rstrip("/") + "/")):
        return path[len(root.rstrip("/")) + 1 :] or "."
    return path


def skipped(name: str) -> bool:
    parts = name.split("/")
    return any(p in SKIP_DIRS for p in parts) or os.path.splitext(name)[1].lower() in BINARY_EXTENSIONS


def split(pattern: str, shown: Sequence[str] = ()) -> list[str]:
    """Patterns that together match exactly what ``pattern`` (``<prefix>*``) matches.

    ``shown``: the names a cut answer showed (relative to the directory). When they all begin alike
    beyond the prefix (``beta_`` in a directory of ``beta_*`` files), the split starts after that
    common beginning, with one pattern more per character of it for the names that leave it there,
    instead of one level of name classes per character."""
    prefix = pattern[:-1]
    plain = [prefix + c + "*" for c in NAME_CLASSES] + ([prefix] if prefix else [])
    elements = _elements(prefix)
    common = _common_start(shown)
    if elements is None or len(common) <= len(elements) or not _fits(common, elements):
        return plain
    out: list[str] = []
    for i, element in enumerate(elements):  # names that leave ``common`` within the prefix
        rest = _without(element, common[i])
        if rest is not None:
            out.append(common[:i] + rest + "".join(elements[i + 1 :]) + "*")
    out.append(common[: len(elements)])  # the one name as long as the prefix, if it exists
    for i in range(len(elements), len(common)):  # names that leave it later, or end there
        out += [common[:i] + "[!" + common[i] + "]*", common[: i + 1]]
    out += [common + c + "*" for c in NAME_CLASSES]
    return [p for p in out if p not in _NO_NAME]  # the glob tool refuses these; no entry has such a name


_NO_NAME = frozenset({"", ".", ".."})
_SPECIAL = frozenset("[]!-\\*?^/")


def _common_start(names: Sequence[str]) -> str:
    """The longest beginning all ``names`` share, up to a character a pattern would read as syntax."""
    if not names:
        return ""
    common = os.path.commonprefix(list(names))
    cut = next((i for i, ch in enumerate(common) if ch in _SPECIAL), len(common))
    return common[:cut]


def _elements(prefix: str) -> list[str] | None:
    """A prefix this module wrote as its characters and classes (``[acd]``, ``[!a-zA-Z_]``), or None."""
    out: list[str] = []
    i = 0
    while i < len(prefix):
        if prefix[i] == "[":
            end = prefix.find("]", i + 1)
            if end < 0:
                return None
            out.append(prefix[i : end + 1])
            i = end + 1
        elif prefix[i] in _SPECIAL:
            return None
        else:
            out.append(prefix[i])
            i += 1
    return out


def _class_chars(element: str) -> tuple[bool, set[str]] | None:
    """A class as (negated, its characters), its ranges spelled out; None for a literal character."""
    if not element.startswith("["):
        return None
    body, negated = element[1:-1], element.startswith("[!")
    body = body[1:] if negated else body
    chars: set[str] = set()
    i = 0
    while i < len(body):
        if i + 2 < len(body) and body[i + 1] == "-":
            chars.update(chr(c) for c in range(ord(body[i]), ord(body[i + 2]) + 1))
            i += 3
        else:
            chars.add(body[i])
            i += 1
    return negated, chars


def _fits(common: str, elements: list[str]) -> bool:
    """Whether the prefix's elements match the first characters of ``common``."""
    for ch, element in zip(common, elements, strict=False):
        cls = _class_chars(element)
        if cls is None and ch != element:
            return False
        if cls is not None and (ch in cls[1]) == cls[0]:
            return False
    return True


def _without(element: str, ch: str) -> str | None:
    """The class of the characters ``element`` matches but ``ch``; None when there are none."""
    cls = _class_chars(element)
    if cls is None:
        return None
    negated, chars = cls
    if negated:
        return "[!" + _spelled(chars | {ch}) + "]"
    rest = chars - {ch}
    return "[" + _spelled(rest) + "]" if rest else None


def _spelled(chars: set[str]) -> str:
    """Characters for a class, in order, runs of three or more as ranges (``a-f``)."""
    ordered = sorted(chars)
    out: list[str] = []
    i = 0
    while i < len(ordered):
        j = i
        while j + 1 < len(ordered) and ord(ordered[j + 1]) == ord(ordered[j]) + 1:
            j += 1
        out.append(ordered[i] + "-" + ordered[j] if j - i >= 2 else "".join(ordered[i : j + 1]))
        i = j + 1
    return "".join(out)


@dataclass
class Answer:
    """One query's answer, whole or in parts (a saved answer is read back in pages)."""

    parts: dict[int, tuple[int, list[str]]] = field(default_factory=dict)  # start -> (next start, names)
    total: int = 1
    cut: bool = False

    @property
    def whole(self) -> bool:
        start, steps = 0, 0
        while start in self.parts and steps <= len(self.parts):
            start, steps = self.parts[start][0], steps + 1
        return start >= self.total

    def next_start(self) -> int:
        start, steps = 0, 0
        while start in self.parts and steps <= len(self.parts):
            start, steps = self.parts[start][0], steps + 1
        return start

    def names(self) -> list[str]:
        return [n for k in sorted(self.parts) for n in self.parts[k][1]]


@dataclass
class Listing:
    root: str | None = None
    answers: dict[tuple[str, str], Answer] = field(default_factory=dict)

    def learn(
        self,
        path: str,
        pattern: str,
        entries: list[str],
        span: tuple[int, int, int] = (0, 1, 1),
        cut: bool = False,
    ) -> list[str]:
        """Record (part of) the answer to ``glob(pattern, path)``: ``span`` is (start, next start,
        total) of the part; returns its names relative to the root."""
        if self.root is None and path == "" and pattern == "*" and entries:
            self.root = os.path.dirname(entries[0].rstrip("/"))
        names = [self.rel(e) for e in entries]  # absolute until the root is known; rel() again when used
        self.record(path, pattern, names, span, cut)
        return names

    def record(
        self, path: str, pattern: str, names: list[str], span: tuple[int, int, int], cut: bool
    ) -> None:
        answer = self.answers.setdefault((path, pattern), Answer())
        answer.parts[span[0]] = (span[1], names)
        answer.total = span[2]
        answer.cut = answer.cut or cut

    def rel(self, entry: str) -> str:
        return rel(self.root, entry)

    def _get(self, path: str, pattern: str) -> Answer | None:
        answer = self.answers.get((path, pattern))
        return answer if answer is not None and answer.whole else None

    def pending(self) -> list[tuple[str, str]]:
        """The queries still to ask (``(path, pattern)``; path relative to the root, '' for the root)."""
        todo = [("", p) for p in FIRST if self._get("", p) is None]
        if todo:
            return todo
        if not self._get("", "**/*").cut:  # type: ignore[union-attr]
            return []
        queue = [""]
        while queue:  # every directory: its subdirectories (``*/``) and its own entries (``*``)
            d = queue.pop()
            subdirs = self._get(d, "*/")
            if subdirs is None:
                todo.append((d, "*/"))
            else:
                queue += [self.rel(n) for n in subdirs.names() if not skipped(self.rel(n))]
            self._own(d, "*", todo)
        return todo

    def _own(self, d: str, pattern: str, todo: list[tuple[str, str]]) -> None:
        answer = self._get(d, pattern)
        if answer is None:
            todo.append((d, pattern))
        elif answer.cut:
            for narrower in split(pattern):
                if narrower != pattern:
                    self._own(d, narrower, todo)

    def files(self) -> list[str]:
        """Every file found (relative to the root), without skipped ones; a name that is another's
        parent, or a ``*/`` answer, is a directory."""
        names: set[str] = set()
        dirs: set[str] = set()
        for (_, pattern), answer in self.answers.items():
            (dirs if pattern == "*/" else names).update(self.rel(n) for n in answer.names())
        for name in names:
            parent = os.path.dirname(name)
            while parent and parent not in dirs:
                dirs.add(parent)
                parent = os.path.dirname(parent)
        return sorted(n for n in names - dirs if n and not skipped(n))

    def seen_anything(self) -> bool:
        return any(a.names() for a in self.answers.values())
