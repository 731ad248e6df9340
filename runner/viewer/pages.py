"""What each page shows, as plain data for the templates: the run's rows and totals, and one job's
charts, compactions and transcript. Pure functions of what :mod:`.data` read."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from markdown_it import MarkdownIt

from ..memory import memory_files
from ..report import SHORT
from ..rundocs import EVENTS, FINAL, TRANSCRIPT, USAGE_KEYS, JobData, ModelCallEvent, RunData, parse_event
from ..store import SUMMARIES, TOOL_RESULTS, safe_name
from .charts import STAGE_COLORS, Mark, Series, bar_chart, line_chart
from .data import number, read_records, read_text

RESULT_SHOWN_CHARS = 4000  # a longer tool result is cut on the page; the whole is one link away
MARKERS = ("[Compacted]", "<persisted-output>", "[Earlier tool result saved at")
_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False})


def page_name(job: str) -> str:
    """The file name of a job's page: one per job, never outside the pages directory."""
    return f"{safe_name(job)}.html"


def link(target: Path, start: Path) -> str:
    return quote(os.path.relpath(target, start).replace(os.sep, "/"))


def retry_counts(record: dict[str, Any]) -> dict[str, int]:
    """Counts of retries and of 429/529 answers in a job's metrics, whatever their exact keys (at the top
    level or one object down)."""
    found: dict[str, int] = {}
    for key, value in record.items():
        inner = value.items() if isinstance(value, dict) else [(None, value)]
        for sub, v in inner:
            name = f"{key}.{sub}" if sub else key
            if any(s in name for s in ("retr", "429", "529")) and number(v):
                found[name] = int(number(v))
    return found


def job_row(job: JobData, pages: str) -> dict[str, Any]:
    r = job.record
    comp = job.compactions()
    retries = retry_counts(r)
    return {"name": job.name, "href": f"{pages}/{quote(page_name(job.name))}", "status": job.status,
            "turns": int(number(r.get("turns"))), **{k: int(job.usage(k)) for k in USAGE_KEYS},
            "cost": number(r.get("cost_usd")), "wall": number(r.get("wall_s")),
            "compactions": " ".join(f"{SHORT.get(k, k)}:{v}" for k, v in sorted(comp.items())),
            "compaction_total": sum(comp.values()), "retries": sum(retries.values()),
            "retries_title": ", ".join(f"{k} {v}" for k, v in retries.items()),
            "estimated": bool(r.get("usage_estimated")), "error": str(r.get("error") or "")}


def index_context(run: RunData, pages: str) -> dict[str, Any]:
    rows = [job_row(j, pages) for j in run.jobs]
    by_cost = sorted(rows, key=lambda r: -r["cost"])
    chart = bar_chart([(r["name"], r["cost"], r["status"]) for r in by_cost],
                      title="cost per job, highest first (hover a bar for the job)", y_label="USD", money=True)
    head = run.run.head()
    meta = {k: head[k] for k in ("run_id", "backend", "model", "summary_model", "concurrency") if head.get(k) is not None}
    return {"run": run, "rows": rows, "totals": run.run.totals, "chart": chart, "meta": meta,
            "estimated": any(r["estimated"] for r in rows), "statuses": sorted({r["status"] for r in rows}),
            "problems": run.problems, "title": f"run {run.run.run_id or run.dir.name}"}


def _text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(b.get("text", "")) if isinstance(b, dict) else str(b) for b in content)
    return json.dumps(content, ensure_ascii=False)


def _compact_json(value: Any) -> str:
    """On one line when it is short, indented when it is not."""
    line = json.dumps(value, ensure_ascii=False)
    return line if len(line) <= 100 else json.dumps(value, ensure_ascii=False, indent=1)


def _block(block: Any, job: JobData, start: Path, saved: dict[str, str]) -> dict[str, Any]:
    if not isinstance(block, dict):
        return {"kind": "other", "text": json.dumps(block, ensure_ascii=False)}
    kind = block.get("type")
    if kind == "text":
        text = str(block.get("text", ""))
        return {"kind": "text", "text": text, "marker": text.lstrip().startswith(MARKERS)}
    if kind == "tool_use":
        return {"kind": "tool_use", "name": str(block.get("name", "?")), "id": str(block.get("id", "")),
                "input": _compact_json(block.get("input"))}
    if kind == "tool_result":
        text = _text(block.get("content"))
        ident = str(block.get("tool_use_id", ""))
        rel = saved.get(safe_name(ident))
        return {"kind": "tool_result", "id": ident, "text": text[:RESULT_SHOWN_CHARS], "chars": len(text),
                "cut": len(text) > RESULT_SHOWN_CHARS, "error": bool(block.get("is_error")),
                "saved": link(job.dir / rel, start) if rel else None, "saved_name": rel,
                "marker": text.lstrip().startswith(MARKERS)}
    return {"kind": "other", "text": json.dumps(block, ensure_ascii=False, indent=1)[:RESULT_SHOWN_CHARS]}


def _saved_outputs(job: JobData) -> dict[str, str]:
    """Persisted outputs by file stem (a tool_use id made safe): the first save of each id."""
    try:
        names = sorted(p.name for p in (job.dir / TOOL_RESULTS).iterdir())
    except OSError:
        return {}
    out: dict[str, str] = {}
    for name in names:
        stem = name.removesuffix(".txt").split(".")[0]
        out.setdefault(stem, f"{TOOL_RESULTS}/{name}")
    return out


def _event(event: dict[str, Any], job: JobData, start: Path, problems: list[str]) -> dict[str, Any]:
    stage = str(event.get("stage", "?"))
    paths = [p for p in event.get("paths", []) if isinstance(p, str)] if isinstance(event.get("paths"), list) else []
    root = job.dir.resolve()
    files, summary = [], None
    for rel in paths:
        target = job.dir / rel
        if root not in target.resolve().parents:
            continue
        files.append({"name": rel, "href": link(target, start)})
        if rel.startswith(f"{SUMMARIES}/") and summary is None:
            summary = read_text(target, problems)
    return {"stage": stage, "color": STAGE_COLORS.get(stage, "#555"),
            "before": int(number(event.get("messages_before"))), "after": int(number(event.get("messages_after"))),
            "chars_before": int(number(event.get("chars_before"))), "chars_after": int(number(event.get("chars_after"))),
            "files": files, "summary": summary}


def job_context(job: JobData, start: Path, index_href: str) -> dict[str, Any]:
    """Everything one job's page shows. ``start`` is the page's directory (links are relative to it)."""
    problems: list[str] = []
    calls: list[ModelCallEvent] = []
    timeline: dict[int, list[dict[str, Any]]] = {}  # compactions before model call n (n = calls seen + 1)
    compactions: list[dict[str, Any]] = []
    marks: list[Mark] = []
    chars: list[tuple[float, float]] = []  # the size sent to each call, and each compaction's drop before it
    for record in read_records(job.dir / EVENTS, problems):
        event, problem = parse_event(record, str(job.dir / EVENTS))
        if problem:  # a line of a known kind without its fields: named, and left out of the charts
            problems.append(problem)
            continue
        if isinstance(event, ModelCallEvent):
            calls.append(event)
            chars.append((event.turn, event.chars))
        else:
            shown = _event(event.line(), job, start, problems)
            shown["before_call"] = len(calls) + 1
            compactions.append(shown)
            if shown["chars_before"] or shown["chars_after"]:
                chars += [(len(calls) + 0.5, shown["chars_before"]), (len(calls) + 0.5, shown["chars_after"])]
            timeline.setdefault(len(calls) + 1, []).append(shown)
            marks.append(Mark(len(calls) + 0.5, f"{shown['stage']} before call {len(calls) + 1}: "
                              f"{shown['chars_before']:,} -> {shown['chars_after']:,} chars", shown["color"]))
    limits = job.limits()
    char_limit = number(limits.get("context_char_limit"))
    token_limit = number(limits.get("context_token_limit"))
    tokens: list[tuple[float, float]] = [(c.turn, c.tokens) for c in calls if c.tokens]
    estimated = any(c.estimated for c in calls)
    token_label = "tokens" + (" (estimated)" if estimated else "")
    series = [Series("characters of the messages (each compaction's drop drawn at its mark)",
                     chars if calls else [], "#1f77b4")]
    if tokens:
        series.append(Series(token_label, tokens, "#ff7f0e", right=True))
    limit_lines = [(char_limit, f"context_char_limit {char_limit:,.0f}", False)] if char_limit else []
    if token_limit and tokens:
        limit_lines.append((token_limit, f"context_token_limit {token_limit:,.0f}", True))
    charts = []
    if calls:
        charts.append(line_chart(series, title="context before each model call; lines mark compactions",
                                 x_label="model call", left_label="characters",
                                 right_label=token_label if tokens else "", limits=limit_lines, marks=marks))
        charts.append(line_chart([Series("cost so far", [(c.turn, c.cost_usd) for c in calls], "#2ca02c")],
                                 title="cost over model calls", x_label="model call", left_label="USD", money=True,
                                 height=200))
    transcript = read_records(job.dir / TRANSCRIPT, problems)
    saved = _saved_outputs(job)
    items: list[dict[str, Any]] = []
    turn = 0
    for number_, message in enumerate(transcript, 1):
        role = str(message.get("role", "?"))
        if role == "assistant":
            turn += 1
            items.extend({"kind": "event", **e} for e in timeline.pop(turn, []))
        content = message.get("content")
        blocks = [_block(b, job, start, saved) for b in content] if isinstance(content, list) else [
            {"kind": "text", "text": str(content), "marker": str(content).lstrip().startswith(MARKERS)}]
        items.append({"kind": "message", "role": role, "line": number_, "turn": turn if role == "assistant" else None,
                      "blocks": blocks})
    for rest in timeline.values():  # after the last reply (or from a run without model_call records)
        items.extend({"kind": "event", **e} for e in rest)
    final = read_text(job.dir / FINAL, problems)
    usage = {k: int(job.usage(k)) for k in USAGE_KEYS}
    return {"job": job, "row": job_row(job, "."), "usage": usage, "charts": charts, "compactions": compactions,
            "items": items, "final_html": _markdown.render(final) if final is not None else None,
            "problems": problems, "index_href": index_href, "row_model": job.record.get("model") or job.spec.get("model"),
            "stage_colors": [(s, STAGE_COLORS.get(s, "#555")) for s in dict.fromkeys(e["stage"] for e in compactions)], "limits": limits, "spec": job.spec,
            "title": f"job {job.name}", "transcript_href": link(job.dir / TRANSCRIPT, start),
            "dir_href": link(job.dir, start),
            "memories": [{"path": path, "size": size} for path, size in memory_files(str(job.dir))]}
