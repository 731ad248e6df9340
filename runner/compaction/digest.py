"""The digest a snip marker carries: what the archived messages did, deterministic and small.

Files read, files written or edited, the other calls made (each once, with how often), and where
each output the job saved is, newest kept first, within :data:`~runner.protocol.SNIP_DIGEST_CHARS`.
A snip that archives an earlier snip's marker carries that marker's digest forward (merged, newest
wins), so the marker always speaks for everything archived so far, and never grows past its size.
"""

from __future__ import annotations

import os

from ..messages import Message, blocks, one_line, tool_results, tool_uses
from ..protocol import (
    DIGEST_CALLS,
    DIGEST_HEADING,
    DIGEST_MORE,
    DIGEST_READ,
    DIGEST_UNDER,
    DIGEST_WRITTEN,
    SNIP_DIGEST_CHARS,
    archived_span,
    saved_path,
)

SEP = "; "
SAVED = " → "
TIMES = " ×"
_KINDS = ((DIGEST_WRITTEN, "written"), (DIGEST_READ, "read"), (DIGEST_CALLS, "calls"))


class _Items:
    """One category's items in first-seen order, each once, with a count and the newest saved path."""

    def __init__(self) -> None:
        self.items: dict[str, tuple[int, str | None]] = {}

    def add(self, item: str, saved: str | None = None, times: int = 1) -> None:
        count, old = self.items.pop(item, (0, None))
        self.items[item] = (count + times, saved or old)  # re-inserted: the newest comes last

    def shown(self, under: str) -> list[str]:
        out = []
        for item, (count, saved) in self.items.items():
            text = item[len(under) :] if under and item.startswith(under) else item
            out.append(text + (f"{TIMES}{count}" if count > 1 else "") + (f"{SAVED}{saved}" if saved else ""))
        return out


def _parse_item(text: str) -> tuple[str, str | None, int]:
    item, _, saved = text.partition(SAVED)
    times = 1
    base, sep, count = item.rpartition(TIMES)
    if sep and count.isdigit():
        item, times = base, int(count)
    return item, saved or None, times


def _carry(text: str, kinds: dict[str, _Items]) -> None:
    """Add an earlier marker's digest items (older than anything archived with it)."""
    lines = text.split("\n")
    under = ""
    for line in lines[1:]:
        if line.startswith(DIGEST_UNDER.split("{", 1)[0]) and line.endswith(")"):
            under = line[len(DIGEST_UNDER.split("{", 1)[0]) : -1]
    for line in lines[1:]:
        for fmt, kind in _KINDS:
            prefix = fmt.split("{", 1)[0]
            if not line.startswith(prefix):
                continue
            for part in line[len(prefix) :].split(SEP):
                if not part or part.startswith(DIGEST_MORE.split("{", 1)[0]):
                    continue
                item, saved, times = _parse_item(part)
                if kind == "read" and under and not item.startswith("/"):
                    item = under + item
                kinds[kind].add(item, saved, times)


def _common_directory(paths: list[str]) -> str:
    if len(paths) < 2 or not all(p.startswith("/") for p in paths):
        return ""
    under = os.path.commonpath(paths)
    if under == "/" or under in paths or not all(p.startswith(under + "/") for p in paths):
        return ""
    return under + "/"


def _line(fmt: str, items: list[str], room: int) -> str:
    """``fmt`` with the newest ``items`` that fit in ``room``, and how many older ones were left out."""
    if not items:
        return ""
    whole = fmt.format(items=SEP.join(items))
    if len(whole) <= room:
        return whole
    kept: list[str] = []
    for item in reversed(items):
        more = DIGEST_MORE.format(n=len(items) - len(kept) - 1)
        if len(fmt.format(items=SEP.join([more, item, *kept]))) > room:
            break
        kept.insert(0, item)
    line = fmt.format(items=SEP.join([DIGEST_MORE.format(n=len(items) - len(kept)), *kept]))
    return line if len(line) <= room else ""


def marker_texts(message: Message) -> list[str]:
    """The snip markers in a user message (a marker may have merged into the message it followed)."""
    if message.get("role") != "user":
        return []
    content = message.get("content")
    texts = (
        [content]
        if isinstance(content, str)
        else [str(b.get("text", "")) for b in blocks(message) if b.get("type") == "text"]
    )
    return [t for t in texts if archived_span(t)]


def digest(messages: list[Message], max_chars: int = SNIP_DIGEST_CHARS) -> str:
    """The digest of archived ``messages`` (earlier snip markers among them carried forward)."""
    kinds = {kind: _Items() for _, kind in _KINDS}
    uses: dict[str, dict] = {}
    for message in messages:
        if message.get("role") == "assistant":
            for use in tool_uses(message):
                uses[str(use.get("id"))] = use
            continue
        for text in marker_texts(message):
            _carry(text, kinds)
        for result in tool_results(message):
            use = uses.get(str(result.get("tool_use_id")), {})
            name, args = use.get("name"), use.get("input") or {}
            if not isinstance(name, str) or name == "compact" or not isinstance(args, dict):
                continue
            saved = saved_path(result.get("content"))
            if name == "read":
                kinds["read"].add(str(args.get("file_path")), saved)
            elif name in ("write", "edit"):
                kinds["written"].add(f"{name} {args.get('file_path')}")
            else:
                shown = ", ".join(f"{k}={v!r}" for k, v in sorted(args.items()))
                kinds["calls"].add(f"{name}({one_line(shown, 100)})", saved)
    if not any(k.items for k in kinds.values()):
        return ""
    under = _common_directory(list(kinds["read"].items))
    lines = [DIGEST_HEADING] + ([DIGEST_UNDER.format(under=under)] if under else [])
    room = max_chars - sum(len(line) + 1 for line in lines)
    present = [(fmt, kind) for fmt, kind in _KINDS if kinds[kind].items]
    for i, (fmt, kind) in enumerate(present):
        share = room // (len(present) - i)  # what a category leaves passes on to the next
        line = _line(fmt, kinds[kind].shown(under if kind == "read" else ""), share - 1)
        if line:
            lines.append(line)
            room -= len(line) + 1
    return "\n".join(lines)[:max_chars] if len(lines) > 1 + bool(under) else ""
