"""What each page shows, as plain data for the templates: the run's rows and totals, and one job's
charts, compactions and transcript. Pure functions of what :mod:`.data` read.

Guarantees:
- A long job's page reads from the top: its final report first (cut at :data:`FINAL_SHOWN_CHARS`, the
  whole one link away), its compactions as counts by stage (``metrics.json``'s) with their table folded
  (at most :data:`COMPACTIONS_SHOWN` rows), and a context chart whose compaction marks are one line each
  up to :data:`MARKS_SHOWN`, beyond that counted per span of model calls (at most :data:`MARK_GROUPS`
  stacked bars, each with its counts by stage on hover).
- A job's pages are bounded: the transcript is split into pages (:func:`split_transcript`) of about
  :data:`TRANSCRIPT_PAGE_CHARS` characters shown (a turn is never split across two pages), and all its
  pages together show at most about :data:`JOB_SHOWN_CHARS` characters of its texts, tool inputs,
  results and summaries (:func:`fit_shown`: the longest are cut to one length, never below
  :data:`SHOWN_FLOOR_CHARS`), each cut block naming the line of ``transcript.jsonl`` that holds it whole.
  So what the pages take grows with the number of messages, not with their size.
- An incremental job's report is shown against its baseline's (:func:`since_baseline`), compared by
  :func:`runner.ui.diff.job_diff` as ``runner diff`` compares it (the diff cut at
  :data:`DIFF_SHOWN_CHARS`, at most :data:`UNITS_SHOWN` rows or sections of each kind named); the index
  marks each job whose report changed, and links each baseline run that is still a run beside this one.
- Its counts are ``metrics.json``'s: the retries as it counts them (the 429/529 answers beside them,
  never added), the compactions its compaction events (a call's retries or a worker lost are in the
  transcript only).

A job's subagents each have a full job page of their own, under the job's (``<job>/agents/<agent>.html``
and its further transcript pages beside it), linked from the job's tree of subagents and from the
``task`` results in its transcript, and linking back to it."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any
from urllib.parse import quote

from markdown_it import MarkdownIt

from ...compaction.stages import SUMMARY_STAGES, Stage
from ...protocol import COMPACTED, REACTIVE_COMPACT, marker_of, subagent_result
from ...rundir.docs import (
    AGENTS,
    EVENTS,
    FINAL,
    INDEX,
    SUMMARIES,
    TRANSCRIPT,
    USAGE_KEYS,
    CompactionEvent,
    JobData,
    JobMetrics,
    ModelCallEvent,
    RunData,
    output_stem,
    parse_event,
)
from ...rundir.store import safe_name
from ...tools.memory_files import MEMORY_DIR, memory_files
from ..diff import job_diff, status_of
from ..report import short_name, subagent_counts
from .charts import Mark, MarkGroup, Series, bar_chart, group_marks, group_step, line_chart, stage_color
from .data import baseline_of, number, read_records, read_text, subagents_of

RESULT_SHOWN_CHARS = 4000  # a longer tool result is cut on the page; the whole is one link away
TEXT_SHOWN_CHARS = 20_000  # so is a longer text or tool input (a report, a file written)
TRANSCRIPT_PAGE_CHARS = 800_000  # characters of transcript shown on one page, at most (plus one turn)
JOB_SHOWN_CHARS = 4_000_000  # characters of a job's blocks shown over all its pages (longest cut first)
SHOWN_FLOOR_CHARS = 300  # ... never cutting a block shorter than this
FINAL_SHOWN_CHARS = 100_000  # characters of final.md rendered on the job's page
COMPACTIONS_SHOWN = 500  # rows of the job page's compactions table (every one is in the transcript too)
MARKS_SHOWN = 60  # compaction marks drawn one line each on the context chart; more are counted in groups
DIFF_SHOWN_CHARS = 100_000  # characters of the unified diff against the baseline's report shown
UNITS_SHOWN = 50  # rows (or sections) added, removed and changed named, of each
MARK_GROUPS = 60  # groups of marks, at most (each a span of model calls, 1, 2 or 5 times a power of ten)
_markdown = MarkdownIt("commonmark", {"html": False, "linkify": False})


def is_marker(text: str) -> bool:
    """Whether ``text`` is one of the markers the runner puts in place of what it removed (shown apart)."""
    return marker_of(text.lstrip()) is not None


def summary_label(stage: str) -> str | None:
    """The label of the summary message a stage replaced the history with, or None for another stage."""
    if stage not in SUMMARY_STAGES:
        return None
    return f"[{REACTIVE_COMPACT if stage == Stage.REACTIVE_COMPACT else COMPACTED}]"


def page_name(job: str) -> str:
    """The file name of a job's page: one per job, never outside the pages directory."""
    return f"{safe_name(job)}.html"


def transcript_page_name(job: str, number: int) -> str:
    """The file name of page ``number`` (2 or more) of a job's transcript; page 1 is on the job's page. A
    safe name has no dot, so these never meet another job's page."""
    return f"{safe_name(job)}.{number}.html"


def agents_page_dir(job: str) -> str:
    """Where a job's subagents' pages go, relative to the pages directory: a directory of its own per
    job (a safe name is never ``.made-by``, nor a page's name, which ends in ``.html``)."""
    return f"{safe_name(job)}/{AGENTS}"


def page_number(job: str, name: str) -> int | None:
    """Which page of ``job`` the file name ``name`` is (1: the job's page), or None."""
    if name == page_name(job):
        return 1
    stem, dot, rest = name.removesuffix(".html").partition(".")
    if (
        name.endswith(".html")
        and dot
        and stem == safe_name(job)
        and rest.isdigit()
        and not rest.startswith("0")
    ):
        number_ = int(rest)
        return number_ if number_ >= 2 else None
    return None


def link(target: Path, start: Path) -> str:
    return quote(os.path.relpath(target, start).replace(os.sep, "/"))


def retry_counts(metrics: JobMetrics) -> dict[str, int]:
    """A job's retries as ``metrics.json`` counts them (``retries``: the SDK's resends, of every call),
    then the answers that caused some of them (429, 529, other 5xx), each when not zero."""
    counts = {
        "retries": metrics.retries,
        "429": metrics.rate_limited_429,
        "529": metrics.overloaded_529,
        "5xx": metrics.server_errors_5xx,
    }
    return {k: v for k, v in counts.items() if v}


def job_row(job: JobData, pages: str) -> dict[str, Any]:
    r = job.record
    comp = job.compactions()
    retries = retry_counts(job.metrics)
    agents, agents_failed, agents_running = subagent_counts(job.metrics.subagents)
    return {
        "name": job.name,
        "href": f"{pages}/{quote(page_name(job.name))}",
        "status": job.status,
        "turns": int(number(r.get("turns"))),
        **{k: int(job.usage(k)) for k in USAGE_KEYS},
        "cost": number(r.get("cost_usd")),
        "wall": number(r.get("wall_s")),
        "compactions": " ".join(f"{short_name(k)}:{v}" for k, v in sorted(comp.items())),
        "compaction_total": sum(comp.values()),
        "retries": job.metrics.retries,
        "retries_title": ", ".join(f"{k} {v}" for k, v in retries.items()),
        "estimated": bool(r.get("usage_estimated")),
        "error": str(r.get("error") or ""),
        "subagents": agents,
        "subagents_failed": agents_failed,
        "subagents_running": agents_running,
    }


def diff_line_kind(line: str) -> str:
    """How a line of a unified diff is shown: ``add``, ``del``, ``hunk``, ``file`` or ``ctx``."""
    if line.startswith(("+++ ", "--- ")):
        return "file"
    return {"+": "add", "-": "del", "@": "hunk"}.get(line[:1], "ctx")


def since_baseline(job: JobData, start: Path, problems: list[str]) -> dict[str, Any] | None:
    """An incremental job's report against its baseline's, for a page in directory ``start``; None for a
    job without a baseline. ``href`` is the baseline run's page (or directory) when it is still a run
    beside this one, ``diff`` None when it is not (nothing to compare with)."""
    baseline = baseline_of(job, problems)
    if baseline is None:
        return None
    where = baseline.index
    shown: dict[str, Any] = {
        "run_id": baseline.run_id,
        "href": link(where, start) if where is not None else None,
        "viewed": where is not None and where.name == INDEX,
        "in_baseline": baseline.status is not None,
        "diff": None,
    }
    if baseline.dir is None:
        return shown
    result = job_diff(job.name, baseline.dir, baseline.status, run_b=job.dir.parent, status_b=status_of(job))
    problems += result.problems
    text = result.diff[:DIFF_SHOWN_CHARS]
    return {
        **shown,
        "changed": result.report_changed,
        "diff": [{"kind": diff_line_kind(line), "text": line} for line in text.splitlines()],
        "diff_cut": len(result.diff) > DIFF_SHOWN_CHARS,
        "diff_chars": len(result.diff),
        "diff_shown": DIFF_SHOWN_CHARS,
        "unit": result.unit,
        "units": [
            (label, names[:UNITS_SHOWN], len(names))
            for label, names in (
                ("added", result.added),
                ("removed", result.removed),
                ("changed", result.changed),
            )
            if names
        ],
    }


def index_context(run: RunData, pages: str, *, start: Path | None = None) -> dict[str, Any]:
    """The index's rows, totals and chart; with ``start`` (the index's directory) each incremental job's
    row says whether its report changed since its baseline, and the baseline runs are linked."""
    rows = [job_row(j, pages) for j in run.jobs]
    baselines: dict[str, dict[str, Any]] = {}
    for job, row in zip(run.jobs, rows, strict=True):
        since = since_baseline(job, start, []) if start is not None else None
        row["baseline"] = since["run_id"] if since else None
        row["changed"] = since.get("changed") if since else None
        if since:
            baselines.setdefault(since["run_id"], {**since, "jobs": 0, "changed_jobs": 0})
            baselines[since["run_id"]]["jobs"] += 1
            baselines[since["run_id"]]["changed_jobs"] += bool(since.get("changed"))
    by_cost = sorted(rows, key=lambda r: -r["cost"])
    chart = bar_chart(
        [(r["name"], r["cost"], r["status"]) for r in by_cost],
        title="cost per job, highest first (hover a bar for the job)",
        y_label="USD",
        money=True,
    )
    head = run.run.head()
    meta = {
        k: head[k]
        for k in ("run_id", "backend", "model", "summary_model", "concurrency")
        if head.get(k) is not None
    }
    return {
        "run": run,
        "rows": rows,
        "totals": run.run.totals,
        "chart": chart,
        "meta": meta,
        "estimated": any(r["estimated"] for r in rows),
        "with_subagents": any(r["subagents"] for r in rows),
        "baselines": list(baselines.values()),
        "statuses": sorted({r["status"] for r in rows}),
        "problems": run.problems,
        "title": f"run {run.run.run_id or run.dir.name}",
    }


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


def _text_block(text: str) -> dict[str, Any]:
    return {
        "kind": "text",
        "text": text[:TEXT_SHOWN_CHARS],
        "chars": len(text),
        "cut": len(text) > TEXT_SHOWN_CHARS,
        "marker": is_marker(text),
    }


def _block(
    block: Any, job: JobData, start: Path, *, saved: dict[str, str], agents: dict[str, str]
) -> dict[str, Any]:
    if not isinstance(block, dict):
        return {"kind": "other", "text": json.dumps(block, ensure_ascii=False)}
    kind = block.get("type")
    if kind == "text":
        return _text_block(str(block.get("text", "")))
    if kind == "tool_use":
        shown = _compact_json(block.get("input"))
        return {
            "kind": "tool_use",
            "name": str(block.get("name", "?")),
            "id": str(block.get("id", "")),
            "input": shown[:TEXT_SHOWN_CHARS],
            "chars": len(shown),
            "cut": len(shown) > TEXT_SHOWN_CHARS,
        }
    if kind == "tool_result":
        text = _text(block.get("content"))
        ident = str(block.get("tool_use_id", ""))
        rel = saved.get(safe_name(ident))
        head = subagent_result(text)
        return {
            "kind": "tool_result",
            "id": ident,
            "text": text[:RESULT_SHOWN_CHARS],
            "chars": len(text),
            "agent": head[0] if head else None,
            "agent_href": agents.get(head[0]) if head else None,
            "cut": len(text) > RESULT_SHOWN_CHARS,
            "error": bool(block.get("is_error")),
            "saved": link(job.dir / rel, start) if rel else None,
            "saved_name": rel,
            "marker": is_marker(text),
        }
    return {"kind": "other", "text": json.dumps(block, ensure_ascii=False, indent=1)[:RESULT_SHOWN_CHARS]}


def _saved_outputs(compactions: list[dict[str, Any]]) -> dict[str, str]:
    """Persisted outputs by file stem (a tool_use id made safe), as the compactions' events name them:
    the first save of each id."""
    out: dict[str, str] = {}
    for shown in compactions:
        for file in shown["files"]:
            stem = output_stem(file["name"])
            if stem is not None:
                out.setdefault(stem, file["name"])
    return out


def _event(event: dict[str, Any], job: JobData, start: Path, *, problems: list[str]) -> dict[str, Any]:
    stage = str(event.get("stage", "?"))
    paths = (
        [p for p in event.get("paths", []) if isinstance(p, str)]
        if isinstance(event.get("paths"), list)
        else []
    )
    root = job.dir.resolve()
    files, summary, summary_href = [], None, None
    for rel in paths:
        target = job.dir / rel
        if root not in target.resolve().parents:
            continue
        files.append({"name": rel, "href": link(target, start)})
        if rel.startswith(f"{SUMMARIES}/") and summary is None:
            summary = read_text(target, problems)
            summary_href = files[-1]["href"]
    return {
        "stage": stage,
        "color": stage_color(stage),
        "summary_label": summary_label(stage),
        "before": int(number(event.get("messages_before"))),
        "after": int(number(event.get("messages_after"))),
        "chars_before": int(number(event.get("chars_before"))),
        "chars_after": int(number(event.get("chars_after"))),
        "files": files,
        "summary": summary[:TEXT_SHOWN_CHARS] if summary is not None else None,
        "summary_cut": summary is not None and len(summary) > TEXT_SHOWN_CHARS,
        "summary_href": summary_href,
    }


def subagent_tree(
    job: JobData, start: Path, problems: list[str]
) -> tuple[list[JobData], list[dict[str, Any]]]:
    """A job's subagents (each a job of its own) and the rows of its tree on the page in directory
    ``start``: one per subagent directory, linked to its page, then any row of the job's ``subagents``
    with no directory (not linked)."""
    children = subagents_of(job, problems)
    rows = [
        {
            **job_row(child, "."),
            "href": link(start / agents_page_dir(job.name) / page_name(child.name), start),
        }
        for child in children
    ]
    shown = {child.name for child in children}
    for row in job.metrics.subagents:
        name = row.get("agent") if isinstance(row, dict) else None
        if isinstance(name, str) and name not in shown:
            rows.append(
                {
                    "name": name,
                    "href": None,
                    "status": str(row.get("status", "?")),
                    "turns": int(number(row.get("turns"))),
                    "cost": number(row.get("cost_usd")),
                    "wall": number(row.get("wall_s")),
                    "error": str(row.get("error") or ""),
                }
            )
    return children, rows


def job_context(
    job: JobData, start: Path, index_href: str, *, parent: tuple[str, str] | None = None
) -> dict[str, Any]:
    """Everything one job's page shows. ``start`` is the page's directory (links are relative to it);
    ``parent`` is, on a subagent's page, its job's name and the link to its page."""
    problems: list[str] = []
    children, tree = subagent_tree(job, start, problems) if parent is None else ([], [])
    agent_hrefs = {f"{AGENTS}/{child.name}": row["href"] for child, row in zip(children, tree, strict=False)}
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
            shown = _event(event.line(), job, start, problems=problems)
            shown["before_call"] = len(calls) + 1
            timeline.setdefault(len(calls) + 1, []).append(shown)
            if not isinstance(event, CompactionEvent):  # a call's retries, a last call, a worker lost: in
                continue  # the transcript only, as metrics.json counts compactions
            compactions.append(shown)
            if shown["chars_before"] or shown["chars_after"]:
                chars += [(len(calls) + 0.5, shown["chars_before"]), (len(calls) + 0.5, shown["chars_after"])]
            marks.append(
                Mark(
                    len(calls) + 0.5,
                    f"{shown['stage']} before call {len(calls) + 1}: "
                    f"{shown['chars_before']:,} -> {shown['chars_after']:,} chars",
                    shown["color"],
                    shown["stage"],
                )
            )
    marks_title = "lines mark compactions"
    groups: list[MarkGroup] = []
    if len(marks) > MARKS_SHOWN:  # a line each would be a solid band: counted per span of calls instead
        x_max = max(len(calls), marks[-1].x)
        groups = group_marks(marks, x_max=x_max, most=MARK_GROUPS)
        step = group_step(x_max, MARK_GROUPS)
        span = "model call" if step == 1 else f"{step} model calls"
        marks_title = f"the bars under it count its {len(marks):,} compactions per {span} (hover one)"
        marks = []
    limits = job.limits()
    char_limit = number(limits.get("context_char_limit"))
    token_limit = number(limits.get("context_token_limit"))
    tokens: list[tuple[float, float]] = [(c.turn, c.tokens) for c in calls if c.tokens]
    estimated = any(c.estimated for c in calls)
    token_label = "tokens" + (" (estimated)" if estimated else "")
    series = [
        Series(
            "characters of the messages (each compaction's drop drawn at its mark)",
            chars if calls else [],
            "#1f77b4",
        )
    ]
    if tokens:
        series.append(Series(token_label, tokens, "#ff7f0e", right=True))
    limit_lines = [(char_limit, f"context_char_limit {char_limit:,.0f}", False)] if char_limit else []
    if token_limit and tokens:
        limit_lines.append((token_limit, f"context_token_limit {token_limit:,.0f}", True))
    charts = []
    if calls:
        charts.append(
            line_chart(
                series,
                title=f"context before each model call; {marks_title}",
                x_label="model call",
                left_label="characters",
                right_label=token_label if tokens else "",
                limits=limit_lines,
                marks=marks,
                groups=groups,
                group_label="compactions",
            )
        )
        charts.append(
            line_chart(
                [Series("cost so far", [(c.turn, c.cost_usd) for c in calls], "#2ca02c")],
                title="cost over model calls",
                x_label="model call",
                left_label="USD",
                money=True,
                height=200,
            )
        )
    transcript = read_records(job.dir / TRANSCRIPT, problems)
    saved = _saved_outputs(compactions)
    items = _transcript_items(transcript, timeline, job=job, start=start, saved=saved, agents=agent_hrefs)
    pages = split_transcript(fit_shown(items, JOB_SHOWN_CHARS), TRANSCRIPT_PAGE_CHARS)
    final = read_text(job.dir / FINAL, problems)
    usage = {k: int(job.usage(k)) for k in USAGE_KEYS}
    own = job.metrics.usage.to_json()
    return {
        "job": job,
        "row": job_row(job, "."),
        "usage": usage,
        "own_usage": own if own != usage else None,  # its own calls', beside its whole when they differ
        "charts": charts,
        "compactions": compactions,
        "compactions_shown": COMPACTIONS_SHOWN,
        "items": pages[0],
        "transcript_pages": pages,
        "page_links": _page_links(job.name, pages),
        "page": 1,
        "since": since_baseline(job, start, problems) if parent is None else None,
        "final_html": _markdown.render(final[:FINAL_SHOWN_CHARS]) if final is not None else None,
        "final_chars": len(final) if final is not None else 0,
        "final_cut": final is not None and len(final) > FINAL_SHOWN_CHARS,
        "final_shown": FINAL_SHOWN_CHARS,
        "final_href": link(job.dir / FINAL, start),
        "final_name": FINAL,
        "by_stage": [(stage, n, stage_color(stage)) for stage, n in sorted(job.compactions().items())],
        "problems": problems,
        "index_href": index_href,
        "row_model": job.record.get("model") or job.spec.get("model"),
        "limits": limits,
        "spec": job.spec,
        "title": f"subagent {job.name} of job {parent[0]}" if parent else f"job {job.name}",
        "parent": {"name": parent[0], "href": parent[1]} if parent else None,
        "subagents": children,
        "tree": tree,
        "agents_dir": AGENTS,
        "own_cost": job.metrics.own_cost_usd,  # as its spend wrote it (None: a run from before it did)
        "transcript_href": link(job.dir / TRANSCRIPT, start),
        "transcript_name": TRANSCRIPT,
        "memory_dir": MEMORY_DIR,
        "dir_href": link(job.dir, start),
        "memories": [{"path": path, "size": size} for path, size in memory_files(str(job.dir))],
    }


def _transcript_items(
    transcript: list[dict[str, Any]],
    timeline: dict[int, list[dict[str, Any]]],
    *,
    job: JobData,
    start: Path,
    saved: dict[str, str],
    agents: dict[str, str],
) -> list[dict[str, Any]]:
    """The transcript's messages, each assistant reply after the events before its model call (those of
    ``timeline``, by call number), then the events after the last reply."""
    pending = dict(timeline)
    items: list[dict[str, Any]] = []
    turn = 0
    for number_, message in enumerate(transcript, 1):
        role = str(message.get("role", "?"))
        if role == "assistant":
            turn += 1
            items.extend({"kind": "event", **e} for e in pending.pop(turn, []))
        items.append(
            {
                "kind": "message",
                "role": role,
                "line": number_,
                "turn": turn if role == "assistant" else None,
                "blocks": _message_blocks(message.get("content"), job, start, saved=saved, agents=agents),
            }
        )
    for rest in pending.values():  # after the last reply (or from a run without model_call records)
        items.extend({"kind": "event", **e} for e in rest)
    return items


def _message_blocks(
    content: Any, job: JobData, start: Path, *, saved: dict[str, str], agents: dict[str, str]
) -> list[dict[str, Any]]:
    """A message's content as shown: each block of a list, or a string as one text block."""
    if isinstance(content, list):
        return [_block(b, job, start, saved=saved, agents=agents) for b in content]
    return [_text_block(str(content))]


def fair_cap(lengths: list[int], budget: int, *, floor: int = 0) -> int | None:
    """The longest length to cut every one of ``lengths`` to so that they add up to at most ``budget``
    (the shorter ones kept whole), never below ``floor``; None when they fit as they are."""
    if sum(lengths) <= budget:
        return None
    remaining, left = budget, len(lengths)
    for length in sorted(lengths):
        if length * left > remaining:  # the rest are all at least this long: each gets an equal share
            return max(floor, remaining // left)
        remaining -= length
        left -= 1
    return None


def _shown_key(piece: dict[str, Any]) -> str | None:
    """Which field of a block (or compaction) holds the text it shows, or None."""
    return next((k for k in ("text", "input", "summary") if isinstance(piece.get(k), str)), None)


def fit_shown(items: list[dict[str, Any]], budget: int = JOB_SHOWN_CHARS) -> list[dict[str, Any]]:
    """``items`` with what their blocks and compactions show cut to :func:`fair_cap` of ``budget`` (at
    least :data:`SHOWN_FLOOR_CHARS`), each cut one marked so. Pure: the items given are not changed."""
    lengths = [
        len(piece[key])
        for item in items
        for piece in (item.get("blocks") or [item])
        if (key := _shown_key(piece)) is not None
    ]
    cap = fair_cap(lengths, budget, floor=SHOWN_FLOOR_CHARS)
    if cap is None:
        return items

    def cut(piece: dict[str, Any]) -> dict[str, Any]:
        key = _shown_key(piece)
        if key is None or len(piece[key]) <= cap:
            return piece
        flag = "summary_cut" if key == "summary" else "cut"
        return {**piece, key: piece[key][:cap], flag: True}

    return [
        {**item, "blocks": [cut(b) for b in item["blocks"]]} if item.get("blocks") else cut(item)
        for item in items
    ]


def _shown_chars(item: dict[str, Any]) -> int:
    """About how much of the page an item takes: the text it shows, and a little for its frame."""
    if item["kind"] == "event":
        return (
            300 + len(item.get("summary") or "") + sum(len(f["name"]) + len(f["href"]) for f in item["files"])
        )
    return 100 + sum(200 + len(b.get("text") or b.get("input") or "") for b in item["blocks"])


def split_transcript(
    items: list[dict[str, Any]], budget: int = TRANSCRIPT_PAGE_CHARS
) -> list[list[dict[str, Any]]]:
    """``items`` in pages of at most about ``budget`` characters shown, each page starting at a turn (the
    compactions before a model call, then its reply), never splitting one; at least one page."""
    pages: list[list[dict[str, Any]]] = [[]]
    size = 0
    for i, item in enumerate(items):
        starts_turn = (item["kind"] == "event" or item.get("role") == "assistant") and (
            i == 0 or items[i - 1]["kind"] != "event"
        )
        weight = _shown_chars(item)
        if starts_turn and pages[-1] and size + weight > budget:
            pages.append([])
            size = 0
        pages[-1].append(item)
        size += weight
    return pages


def _page_links(job: str, pages: list[list[dict[str, Any]]]) -> list[dict[str, Any]]:
    """For the pager: each page's file (page 1 is the job's page) and the model calls and lines it holds."""
    out = []
    for number_, page in enumerate(pages, 1):
        lines = [it["line"] for it in page if it["kind"] == "message"]
        turns = [it["turn"] for it in page if it["kind"] == "message" and it["turn"]]
        out.append(
            {
                "number": number_,
                "href": quote(page_name(job) if number_ == 1 else transcript_page_name(job, number_)),
                "lines": f"{lines[0]}-{lines[-1]}" if lines else "",
                "turns": f"{turns[0]}-{turns[-1]}" if turns else "",
            }
        )
    return out
