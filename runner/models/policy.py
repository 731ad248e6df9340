"""A deterministic survey policy: it decides every step from the messages it is given.

It is not a language model. Given a conversation, it works out what it already knows (from tool
results still in view, from its own notes in earlier assistant text, from summaries) and takes the
next step of a workspace survey:

1. ``glob`` the workspace;
2. ``read`` every file, ``batch_size`` at a time (parallel tool calls);
3. ``compact`` once, at the end of the read pass, when the tool is offered;
4. ``grep`` each Python file for its top-level definitions (its outline);
5. ``grep`` the workspace for TODO/FIXME/XXX;
6. answer with a factual Markdown report.

After each batch it writes what it learned as note lines in its reply, and every few turns a
checkpoint of everything it knows, so the facts survive compaction. When compaction removes a fact
before it was noted, the policy has to fetch it again: ``rereads`` counts those, which measures
what a compaction strategy lost.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
from dataclasses import dataclass, field
from typing import Any

from ..messages import Message, blocks, result_text, text_of, tool_results, tool_uses

TODO_PATTERN = r"\b(TODO|FIXME|XXX)\b"
OUTLINE_PATTERN = r"^(class |def |async def )"
CHECKPOINT_EVERY = 6  # assistant turns between checkpoints; snip keeps far more than that
SKIP_PARTS = ("__pycache__",)
SAVED = re.compile(r"Full output saved to: (\S+)")
RECALL_PAGE = 20_000  # the most it reads back at once: a page that fits beside the rest of the context
SIZE_LINE = re.compile(r"Original size: (\d+) chars, (\d+) lines")
NOTE = re.compile(r"^- (file|error|outline|listing|todo|todo-scan): (.*)$", re.M)


@dataclass
class Facts:
    """What the policy knows at one point of a conversation."""

    root: str | None = None
    listing: list[str] | None = None  # relative paths of the workspace's entries
    files: dict[str, tuple[int, int, str]] = field(default_factory=dict)  # rel -> chars, lines, doc
    errors: dict[str, str] = field(default_factory=dict)
    outlines: dict[str, int] = field(default_factory=dict)
    todos: list[str] | None = None
    recall_due: dict[str, tuple[str, int]] = field(default_factory=dict)  # persisted path -> kind, size
    recalled: set[str] = field(default_factory=set)


def rel(root: str | None, path: str) -> str:
    if root and (path == root or path.startswith(root.rstrip("/") + "/")):
        return path[len(root.rstrip("/")) + 1:] or "."
    return path


def first_doc_line(text: str) -> str:
    """The first docstring or comment line of a source text, or ''."""
    for raw in text.split("\n")[:200]:
        line = raw.strip()
        if not line or line.startswith("#!") or "coding" in line and line.startswith("#"):
            continue
        for quote in ('"""', "'''", 'r"""', "r'''"):
            if line.startswith(quote):
                body = line[len(quote):].replace(quote.lstrip("r"), "").strip()
                if body:
                    return body[:100]
                break
        else:
            if line.startswith("#"):
                body = line.lstrip("#").strip()
                if body:
                    return body[:100]
                continue
            if line.startswith(("import ", "from ", "__", "class ", "def ")) or "=" in line:
                return ""
            continue
        continue
    return ""


def _count_lines(text: str) -> int:
    return text.count("\n") + (1 if text and not text.endswith("\n") else 0)


def _file_facts(content: str) -> tuple[int, int, str]:
    """chars, lines, first doc line from a read result (whole, or a persisted-output marker)."""
    size = SIZE_LINE.search(content)
    if content.startswith("<persisted-output>") and size:
        preview = content.split("Preview:\n", 1)[-1]
        return int(size.group(1)), int(size.group(2)), first_doc_line(preview)
    return len(content), _count_lines(content), first_doc_line(content)


def _count_matches(content: str) -> int:
    size = SIZE_LINE.search(content)
    if content.startswith("<persisted-output>") and size:
        return int(size.group(2))
    if content.strip() in ("", "no matches"):
        return 0
    return len([line for line in content.split("\n") if line.strip() and not line.startswith("[output truncated")])


def _parse_notes(text: str, facts: Facts) -> None:
    for kind, rest in NOTE.findall(text):
        parts = [p.strip() for p in (rest + " ").split(" | ", 3)]  # a summary may strip a trailing space
        try:
            if kind == "listing":
                facts.root = parts[0]
                facts.listing = [p for p in parts[1].split(", ") if p] if len(parts) > 1 else []
            elif kind == "file" and len(parts) >= 3:
                facts.files[parts[0]] = (int(parts[1]), int(parts[2]), parts[3] if len(parts) > 3 else "")
            elif kind == "error" and len(parts) >= 2:
                facts.errors[parts[0]] = parts[1]
            elif kind == "outline" and len(parts) >= 2:
                facts.outlines[parts[0]] = int(parts[1])
            elif kind == "todo-scan":
                facts.todos = facts.todos if facts.todos is not None else []
            elif kind == "todo" and rest not in (facts.todos or []):
                facts.todos = (facts.todos or []) + [rest]
        except ValueError:  # a note mangled by a summary: the fact counts as unknown
            continue


def _learn_listing(facts: Facts, content: str, notes: list[str] | None) -> None:
    entries = [line.strip() for line in content.split("\n") if line.strip().startswith("/")]
    root = os.path.commonpath(entries) if entries else (facts.root or "")
    if len(entries) == 1:
        root = os.path.dirname(root)
    facts.root = root
    listing = sorted({rel(root, e) for e in entries if not any(p in e.split("/") for p in SKIP_PARTS)})
    dirs = {os.path.dirname(p) for p in listing}
    facts.listing = [p for p in listing if p not in dirs]
    if notes is not None:
        notes.append(f"- listing: {root} | {', '.join(facts.listing)}")


def _learn_todos(facts: Facts, content: str, notes: list[str] | None) -> None:
    hits = [rel(facts.root, line.strip())[:160] for line in content.split("\n")
            if line.strip() and not line.startswith(("no matches", "[output", "[recall"))]
    facts.todos = hits
    if notes is not None:
        notes.append(f"- todo-scan: {len(hits)} matches")
        notes += [f"- todo: {h}" for h in hits[:40]]


def _visible_text(content: str) -> str:
    """The whole lines of a result as the model sees it: a persisted-output marker's preview, or the
    text itself; a line cut off at the end of a preview or page is dropped."""
    if content.startswith("<persisted-output>"):
        content = content.split("Preview:\n", 1)[-1].rsplit("\n</persisted-output>", 1)[0]
        content = content.rsplit("\n", 1)[0]
    elif "\n[recall: characters" in content:
        body, tail = content.rsplit("\n[recall: characters", 1)
        content = body if "end of file" in tail else body.rsplit("\n", 1)[0]
    return content


def _learn(facts: Facts, use: dict[str, Any], result: dict[str, Any], notes: list[str] | None) -> None:
    name, args = use.get("name"), use.get("input") or {}
    content = result_text(result)
    placeholder = content.startswith("[Earlier tool result saved at")
    failed = bool(result.get("is_error"))
    persisted = content.startswith("<persisted-output>") and SAVED.search(content)
    if name in ("glob", "grep") and persisted and not failed:
        # only a preview is in context: read the whole output back with recall (once)
        kind = "glob" if name == "glob" else ("todo" if args.get("pattern") == TODO_PATTERN else None)
        size = SIZE_LINE.search(content)
        if kind:
            facts.recall_due[persisted.group(1)] = (kind, int(size.group(1)) if size else RECALL_PAGE)
            return
    if name == "glob" and not failed and not placeholder:
        _learn_listing(facts, content, notes)
    elif name == "recall" and not placeholder:
        path = str(args.get("path"))
        facts.recalled.add(path)
        kind = facts.recall_due.get(path, (None, 0))[0]
        # one page is all this policy reads back; what is still missing it does without
        page = "" if failed else _visible_text(content)
        if kind == "glob":
            _learn_listing(facts, page, notes)
        elif kind == "todo":
            _learn_todos(facts, page, notes)
    elif name == "read":
        path = rel(facts.root, str(args.get("file_path", "")))
        if placeholder:
            return
        if failed:
            facts.errors[path] = content.replace("\n", " ").replace(" | ", " / ")[:160]
            if notes is not None:
                notes.append(f"- error: {path} | {facts.errors[path]}")
        else:
            chars, lines, doc = _file_facts(content)
            facts.files[path] = (chars, lines, doc.replace(" | ", " / "))
            if notes is not None:
                notes.append(f"- file: {path} | {chars} | {lines} | {facts.files[path][2]}")
    elif name == "grep" and not placeholder:
        if args.get("pattern") == OUTLINE_PATTERN:
            path = rel(facts.root, str(args.get("path", "")))
            facts.outlines[path] = 0 if failed else _count_matches(content)
            if notes is not None:
                notes.append(f"- outline: {path} | {facts.outlines[path]}")
        elif args.get("pattern") == TODO_PATTERN:
            _learn_todos(facts, "" if failed or persisted else content, notes)


def observe(messages: list[Message]) -> tuple[Facts, list[str], int]:
    """Facts from the whole conversation; the notes due for the newest results; turns since the
    last checkpoint."""
    facts = Facts()
    uses: dict[str, dict[str, Any]] = {}
    last_checkpoint = None
    assistant_turns = 0
    for message in messages:
        if message["role"] == "assistant":
            assistant_turns += 1
            text = text_of(message)
            if "## Checkpoint" in text:
                last_checkpoint = assistant_turns
            _parse_notes(text, facts)
            for use in tool_uses(message):
                uses[use.get("id")] = use
        else:
            _parse_notes("\n".join(b.get("text", "") for b in blocks(message) if b.get("type") == "text"), facts)
    new_notes: list[str] = []
    for index, message in enumerate(messages):
        newest = index == len(messages) - 1
        for result in tool_results(message):
            use = uses.get(result.get("tool_use_id"))
            if use is not None:
                _learn(facts, use, result, new_notes if newest else None)
    since = assistant_turns - last_checkpoint if last_checkpoint is not None else assistant_turns
    return facts, new_notes, since


def checkpoint(facts: Facts) -> str:
    lines = ["## Checkpoint (everything learned so far)"]
    if facts.listing is not None:
        lines.append(f"- listing: {facts.root} | {', '.join(facts.listing)}")
    lines += [f"- file: {p} | {c} | {n} | {d}" for p, (c, n, d) in sorted(facts.files.items())]
    lines += [f"- error: {p} | {e}" for p, e in sorted(facts.errors.items())]
    lines += [f"- outline: {p} | {n}" for p, n in sorted(facts.outlines.items())]
    if facts.todos is not None:
        lines.append(f"- todo-scan: {len(facts.todos)} matches")
        lines += [f"- todo: {t}" for t in facts.todos[:40]]
    return "\n".join(lines)


def report(facts: Facts) -> str:
    """The final Markdown report, built from facts alone."""
    root = facts.root or "(workspace)"
    files = facts.files
    out = [f"# Survey of `{root}`", ""]
    out.append(f"{len(files)} files read, {sum(c for c, _, _ in files.values())} chars, "
               f"{sum(n for _, n, _ in files.values())} lines; {len(facts.errors)} entries could not be read.")
    out += ["", "## Files and lines per extension", "", "| extension | files | lines | chars |", "|---|---:|---:|---:|"]
    by_ext: dict[str, list[int]] = {}
    for path, (chars, lines, _) in files.items():
        ext = os.path.splitext(path)[1] or "(none)"
        acc = by_ext.setdefault(ext, [0, 0, 0])
        acc[0] += 1
        acc[1] += lines
        acc[2] += chars
    for ext, (n, lines, chars) in sorted(by_ext.items(), key=lambda kv: (-kv[1][1], kv[0])):
        out.append(f"| {ext} | {n} | {lines} | {chars} |")
    out += ["", "## Largest files", "", "| file | lines | chars |", "|---|---:|---:|"]
    for path, (chars, lines, _) in sorted(files.items(), key=lambda kv: (-kv[1][0], kv[0]))[:10]:
        out.append(f"| {path} | {lines} | {chars} |")
    todos = facts.todos or []
    out += ["", f"## TODO / FIXME / XXX ({len(todos)} found)", ""]
    out += [f"- `{t}`" for t in todos[:40]] or ["(none)"]
    out += ["", "## Every file", "", "| file | lines | top-level definitions | first docstring or comment |",
            "|---|---:|---:|---|"]
    for path, (_, lines, doc) in sorted(files.items()):
        defs = facts.outlines.get(path, "")
        out.append(f"| {path} | {lines} | {defs} | {doc.replace('|', '/')} |")
    if facts.errors:
        out += ["", "## Not readable", ""]
        out += [f"- {p}: {e}" for p, e in sorted(facts.errors.items())]
    return "\n".join(out) + "\n"


def _call_id(messages: list[Message], name: str, args: dict[str, Any], k: int) -> str:
    seed = json.dumps([len(messages), messages[-1] if messages else None, name, args, k], sort_keys=True,
                      default=str)
    return "toolu_off_" + hashlib.sha256(seed.encode()).hexdigest()[:20]


def decide(messages: list[Message], tool_names: set[str], batch_size: int = 4) -> tuple[list[dict[str, Any]], str]:
    """The next assistant content and its stop reason (``tool_use`` or ``end_turn``)."""
    facts, notes, since_checkpoint = observe(messages)
    text_parts: list[str] = []
    if notes:
        text_parts.append("Notes from the last results:\n" + "\n".join(notes))
    calls: list[tuple[str, dict[str, Any]]] = []
    root = facts.root
    known = set(facts.files) | set(facts.errors)
    pending = [p for p in (facts.listing or []) if p not in known]
    python = [p for p in sorted(facts.files) if p.endswith(".py")]
    pending_outline = [p for p in python if p not in facts.outlines]
    summarized = any(m["role"] == "user" and ("[Compacted]" in text_of(m) or "[Reactive compact]" in text_of(m))
                     for m in messages)
    due = {kind: (path, size) for path, (kind, size) in facts.recall_due.items() if path not in facts.recalled}
    if facts.listing is None and "glob" in due and "recall" in tool_names:
        calls.append(("recall", {"path": due["glob"][0], "limit": min(due["glob"][1], RECALL_PAGE)}))
    elif facts.listing is None and "glob" in tool_names:
        calls.append(("glob", {"pattern": "**/*"}))
    elif pending and "read" in tool_names:
        calls += [("read", {"file_path": os.path.join(root or "", p)}) for p in pending[:batch_size]]
    elif pending_outline and not summarized and "compact" in tool_names and not facts.outlines:
        calls.append(("compact", {}))
    elif pending_outline and "grep" in tool_names:
        calls.append(("grep", {"pattern": OUTLINE_PATTERN, "path": os.path.join(root or "", pending_outline[0])}))
    elif facts.todos is None and "todo" in due and "recall" in tool_names:
        calls.append(("recall", {"path": due["todo"][0], "limit": min(due["todo"][1], RECALL_PAGE)}))
    elif facts.todos is None and "grep" in tool_names:
        calls.append(("grep", {"pattern": TODO_PATTERN}))
    if not calls:
        return [{"type": "text", "text": report(facts)}], "end_turn"
    if since_checkpoint >= CHECKPOINT_EVERY or (calls[0][0] == "compact"):
        text_parts.append(checkpoint(facts))
    text_parts.append(f"Next: {calls[0][0]} ({len(calls)} call{'s' if len(calls) > 1 else ''}).")
    content: list[dict[str, Any]] = [{"type": "text", "text": "\n\n".join(text_parts)}]
    for k, (name, args) in enumerate(calls):
        content.append({"type": "tool_use", "id": _call_id(messages, name, args, k), "name": name, "input": args})
    return content, "tool_use"


def partial_report(messages: list[Message]) -> str:
    """The report from what the conversation holds so far, with no further tool call: the answer to
    a request that allows no tools (the job is out of turns, time or budget)."""
    return report(observe(messages)[0])


def reread_count(transcript: list[Message]) -> int:
    """How many read calls in a whole transcript asked for a file already read before."""
    seen: set[str] = set()
    rereads = 0
    for message in transcript:
        for use in tool_uses(message):
            if use.get("name") == "read":
                path = str((use.get("input") or {}).get("file_path"))
                rereads += path in seen
                seen.add(path)
    return rereads
