"""How big and how fast is ``runner view`` for a big run?

A synthetic run of 500 jobs x 200 model calls (the files a real run leaves: run.json, and per job
job.json, metrics.json, events.jsonl with one model_call line per call and a compaction every few
calls, transcript.jsonl, final.md, persisted outputs), then:

- the index alone: time to read every job's metrics and write ``index.html``, and its size
  (targets: under 2 s and under 2 MB);
- every page: the first ``write_view`` (index plus one page per job), and a second one with nothing
  changed (job pages are rewritten only when their files are newer);
- the largest job page;
- one 3,000-turn job (a real survey's files, ~37 MB of transcript): its pages' sizes, the time to write
  them, and the time the real headless Chromium takes to open the job's page and one transcript page
  (``--dump-dom``'s wall time less that of an empty page, the browser's start; median of 3), against
  the same job with its whole transcript on one page, as before pages (targets: under 2 s, under 5 MB).

    python bench/viewer.py            # 500 jobs x 200 calls; writes bench/results/viewer.json and
                                      # BENCHMARKS.md
    python bench/viewer.py --smoke    # 20 jobs x 30 calls and a 300-turn job, seconds, writes nothing
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from common import replace_section, write_result  # noqa: E402
from conftest import CHROMIUM, headless_chromium  # noqa: E402

from runner.compaction.stages import Stage  # noqa: E402
from runner.rundir.docs import load_run  # noqa: E402
from runner.rundir.store import write_atomic_sync  # noqa: E402
from runner.ui.viewer import pages as viewer_pages  # noqa: E402
from runner.ui.viewer.render import render_index, write_view  # noqa: E402

STATUSES = ["succeeded"] * 90 + ["failed"] * 4 + ["max_turns"] * 3 + ["timeout"] * 2 + ["cancelled"]
STAGES = [
    Stage.TOOL_RESULT_BUDGET,
    Stage.SNIP,
    Stage.MICRO_COMPACT,
    Stage.FIT_TOOL_RESULTS,
    Stage.COMPACT_HISTORY,
]


def make_job(run_dir: Path, name: str, calls: int, rng: random.Random) -> dict:
    job_dir = run_dir / name
    (job_dir / "tool-results").mkdir(parents=True)
    (job_dir / "summaries").mkdir()
    limits = {"context_char_limit": 50_000, "context_token_limit": None, "max_turns": calls}
    (job_dir / "job.json").write_text(
        json.dumps({"name": name, "model": "claude-sonnet-5-5", "limits": limits})
    )
    transcript = [{"role": "user", "content": f"Survey package {name}."}]
    events, chars, cost, compactions = [], 2_000, 0.0, {}
    for turn in range(1, calls + 1):
        if turn % 7 == 0:
            stage = STAGES[rng.randrange(len(STAGES))]
            compactions[stage] = compactions.get(stage, 0) + 1
            rel = f"tool-results/toolu_{turn:04d}.txt"
            (job_dir / rel).write_text("persisted output\n" * 200)
            after = chars // 2
            events.append(
                {
                    "ts": turn,
                    "stage": stage,
                    "messages_before": 40,
                    "messages_after": 20,
                    "chars_before": chars,
                    "chars_after": after,
                    "paths": [rel],
                    "cache_invalidated_from": 3,
                }
            )
            chars = after
        chars += rng.randrange(500, 4_000)
        cost += chars / 4 * 3e-6 + 0.002
        events.append(
            {
                "ts": turn,
                "stage": "model_call",
                "turn": turn,
                "chars": chars,
                "tokens": chars // 4,
                "estimated": False,
                "cost_usd": round(cost, 6),
            }
        )
        call_id = f"toolu_{turn:04d}"
        transcript.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Reading file {turn}."},
                    {
                        "type": "tool_use",
                        "id": call_id,
                        "name": "read",
                        "input": {"file_path": f"/src/{name}/m{turn}.py"},
                    },
                ],
            }
        )
        transcript.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": call_id,
                        "content": f"def f{turn}():\n    return {turn}\n" * 12,
                    }
                ],
            }
        )
    transcript.append(
        {"role": "assistant", "content": [{"type": "text", "text": f"# Report on {name}\n\nDone."}]}
    )
    (job_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (job_dir / "transcript.jsonl").write_text("".join(json.dumps(m) + "\n" for m in transcript))
    (job_dir / "final.md").write_text(f"# Report on {name}\n\n- {calls} files read\n")
    usage = {
        "input_tokens": int(cost * 250_000),
        "output_tokens": calls * 300,
        "cache_creation_input_tokens": calls * 100,
        "cache_read_input_tokens": calls * 2_000,
    }
    metrics = {
        "job": name,
        "status": STATUSES[rng.randrange(len(STATUSES))],
        "model": "claude-sonnet-5-5",
        "turns": calls,
        "wall_s": round(rng.uniform(60, 3_600), 3),
        "usage": usage,
        "summarizer_usage": {k: 0 for k in usage},
        "usage_estimated": False,
        "cost_usd": round(cost, 6),
        "compactions": compactions,
        "persisted_bytes": 3400 * len(compactions),
        "error": None,
    }
    (job_dir / "metrics.json").write_text(json.dumps(metrics))
    return metrics


CODE_LINE = (
    "    value = compute(item, options)  # a line of the file being read, as the read tool numbers it\n"
)


def make_long_job(run_dir: Path, name: str, turns: int, seed: int = 3) -> dict:
    """One long job's directory, shaped as a real offline survey's (measured on one: ~12 KB of transcript a
    turn): each turn a short text, a memory write and two reads whose results are 2-6 KB of numbered lines;
    a micro_compact every 2-3 turns (its outputs saved), a compact_history every 8 with a 2.5 KB summary, a
    fit_tool_results every 12; one model_call line per turn."""
    rng = random.Random(seed)
    job_dir = run_dir / name
    for sub in ("tool-results", "summaries", "memories"):
        (job_dir / sub).mkdir(parents=True)
    limits = {"context_char_limit": 50_000, "context_token_limit": None, "max_turns": turns}
    (job_dir / "job.json").write_text(
        json.dumps({"name": name, "model": "claude-sonnet-5-5", "limits": limits})
    )
    transcript: list[dict] = [
        {"role": "user", "content": f"Survey the workspace {name}: every module and its TODOs."}
    ]
    events: list[dict] = []
    chars, cost, compactions, pending, summaries = 8_000, 0.0, {}, [], 0
    for turn in range(1, turns + 1):
        stage_paths: list[tuple[str, list[str]]] = []
        if turn % 8 == 0:
            summaries += 1
            rel = f"summaries/{summaries:04d}.md"
            (job_dir / rel).write_text(
                f"Summary {summaries}: files read so far, what each does.\n"
                + "- module.py: parses the configuration and checks it\n" * 45
            )
            stage_paths.append((Stage.COMPACT_HISTORY, [rel]))
        elif turn % 12 == 0:
            stage_paths.append((Stage.FIT_TOOL_RESULTS, pending[-1:]))
        elif rng.random() < 0.42 and pending:
            stage_paths.append((Stage.MICRO_COMPACT, pending[-3:]))
        for stage, paths in stage_paths:
            for rel in paths:
                if rel.startswith("tool-results/"):
                    (job_dir / rel).write_text(CODE_LINE * 40)
            compactions[stage] = compactions.get(stage, 0) + 1
            after = chars // 3 if stage == Stage.COMPACT_HISTORY else chars * 2 // 3
            events.append(
                {
                    "ts": turn,
                    "stage": stage,
                    "messages_before": 27,
                    "messages_after": 3,
                    "chars_before": chars,
                    "chars_after": after,
                    "paths": paths,
                    "cache_invalidated_from": 2,
                }
            )
            chars = after
        chars += rng.randrange(4_000, 9_000)
        cost += chars / 4 * 3e-6 + 0.002
        events.append(
            {
                "ts": turn,
                "stage": "model_call",
                "turn": turn,
                "chars": chars,
                "tokens": chars // 4,
                "estimated": True,
                "cost_usd": round(cost, 6),
            }
        )
        ids = [f"toolu_off_{turn:05d}_{k}" for k in range(3)]
        pending = [f"tool-results/{i}.txt" for i in ids[1:]]
        transcript.append(
            {
                "role": "assistant",
                "content": [
                    {"type": "text", "text": f"Next: read (2 calls), turn {turn}."},
                    {
                        "type": "tool_use",
                        "id": ids[0],
                        "name": "memory",
                        "input": {
                            "command": "str_replace",
                            "path": "/memories/survey.md",
                            "old_str": "# Survey notes\n",
                            "new_str": "# Survey notes\n"
                            + f"- pkg/m{turn}.py: reads its input and checks it\n" * 6,
                        },
                    },
                    *(
                        {
                            "type": "tool_use",
                            "id": i,
                            "name": "read",
                            "input": {"file_path": f"pkg/m{turn}_{k}.py"},
                        }
                        for k, i in enumerate(ids[1:])
                    ),
                ],
            }
        )
        transcript.append(
            {
                "role": "user",
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": ids[0],
                        "content": "The memory file has been edited.",
                    },
                    *(
                        {
                            "type": "tool_result",
                            "tool_use_id": i,
                            "content": "".join(
                                f"{n:6d}\t{CODE_LINE}" for n in range(1, rng.randrange(30, 80))
                            ),
                        }
                        for i in ids[1:]
                    ),
                ],
            }
        )
    transcript.append(
        {"role": "assistant", "content": [{"type": "text", "text": f"# Report on {name}\n\nDone."}]}
    )
    (job_dir / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (job_dir / "transcript.jsonl").write_text("".join(json.dumps(m) + "\n" for m in transcript))
    (job_dir / "final.md").write_text(f"# Report on {name}\n\n- {turns} turns\n")
    (job_dir / "memories" / "survey.md").write_text("# Survey notes\n" + "- a fact\n" * 200)
    usage = {
        "input_tokens": int(cost * 250_000),
        "output_tokens": turns * 300,
        "cache_creation_input_tokens": 0,
        "cache_read_input_tokens": 0,
    }
    metrics = {
        "job": name,
        "status": "max_turns",
        "model": "claude-sonnet-5-5",
        "turns": turns,
        "wall_s": 900.0,
        "usage": usage,
        "summarizer_usage": {k: 0 for k in usage},
        "usage_estimated": True,
        "cost_usd": round(cost, 6),
        "compactions": compactions,
        "persisted_bytes": 0,
        "error": None,
    }
    (job_dir / "metrics.json").write_text(json.dumps(metrics))
    return metrics


def make_run(run_dir: Path, jobs: int, calls: int) -> None:
    rng = random.Random(1)
    entries = [make_job(run_dir, f"nightly-analysis-{i:03d}", calls, rng) for i in range(jobs)]
    (run_dir / "run.json").write_text(
        json.dumps(
            {
                "run_id": run_dir.name,
                "state": "finished",
                "backend": "anthropic",
                "model": "claude-sonnet-5-5",
                "jobs": entries,
            }
        )
    )


def cpu_s() -> float:
    """CPU seconds of this process and its finished children (the page workers): a shared machine's
    other load changes the wall time, not this."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


TIMES = (
    "index_s",
    "index_cpu_s",
    "all_pages_s",
    "all_pages_cpu_s",
    "unchanged_again_s",
    "unchanged_again_cpu_s",
)


def measure(jobs: int, calls: int, rounds: int = 3) -> dict:
    """``rounds`` runs, each on a run made afresh: each time is the median, with its range under
    ``<name>_range``; sizes and page counts are the same in every round."""
    runs = [measure_once(jobs, calls) for _ in range(rounds)]
    result = dict(runs[0], rounds=rounds)
    for key in TIMES:
        values = sorted(run[key] for run in runs)
        result[key], result[f"{key}_range"] = statistics.median(values), [values[0], values[-1]]
    return result


def measure_once(jobs: int, calls: int) -> dict:
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "20261130-000000-beef"
        make_run(run_dir, jobs, calls)
        index = run_dir / "index.html"
        started, cpu = time.perf_counter(), cpu_s()
        write_atomic_sync(index, render_index(load_run(run_dir), index))
        index_s, index_cpu = time.perf_counter() - started, cpu_s() - cpu
        index_bytes = index.stat().st_size
        index.unlink()
        started, cpu = time.perf_counter(), cpu_s()
        first = write_view(run_dir)
        first_s, first_cpu = time.perf_counter() - started, cpu_s() - cpu
        time.sleep(0.01)
        started, cpu = time.perf_counter(), cpu_s()
        again = write_view(run_dir)
        again_s, again_cpu = time.perf_counter() - started, cpu_s() - cpu
        pages = sorted(p.stat().st_size for p in first.pages_dir.iterdir())
        return {
            "jobs": jobs,
            "calls_per_job": calls,
            "index_s": round(index_s, 3),
            "index_cpu_s": round(index_cpu, 3),
            "index_bytes": index_bytes,
            "all_pages_s": round(first_s, 3),
            "all_pages_cpu_s": round(first_cpu, 3),
            "pages_written": first.pages_written,
            "unchanged_again_s": round(again_s, 3),
            "unchanged_again_cpu_s": round(again_cpu, 3),
            "pages_rewritten_again": again.pages_written,
            "largest_page_bytes": pages[-1],
            "all_pages_bytes": sum(pages),
        }


def _chromium_once(target: Path, profile: Path) -> float:
    """Wall seconds of one headless Chromium ``--dump-dom`` of ``target``."""
    started = time.perf_counter()
    subprocess.run(
        headless_chromium(profile, "--dump-dom", target.resolve().as_uri()),
        capture_output=True,
        check=True,
        timeout=120,
    )
    return time.perf_counter() - started


def chromium_start_s(profile: Path, rounds: int = 3) -> float:
    """The headless Chromium's start-up: the median ``--dump-dom`` wall time of an empty page, over
    ``rounds`` (the profile made first, outside the timings)."""
    empty = profile.parent / "empty.html"
    empty.write_text("<!doctype html><p>x</p>")
    _chromium_once(empty, profile)
    return statistics.median(_chromium_once(empty, profile) for _ in range(rounds))


def open_s(
    page: Path, profile: Path, rounds: int = 3, start_s: float | None = None
) -> tuple[float, float, float] | None:
    """Seconds the headless Chromium takes to load ``page`` and lay out its DOM, less its start-up (the
    median for an empty page; ``start_s`` when measured already): the median of ``rounds`` and their
    range; None without a Chromium."""
    if CHROMIUM is None:
        return None
    base = chromium_start_s(profile, rounds) if start_s is None else start_s
    times = sorted(max(_chromium_once(page, profile) - base, 0.0) for _ in range(rounds))
    return statistics.median(times), times[0], times[-1]


def measure_long(turns: int, rounds: int = 3, one_start: bool = False) -> dict:
    """The long job's page: its sizes and open times; ``one_start``: the browser's start-up measured once
    for the three pages, not before each (a smoke run's saving)."""
    with tempfile.TemporaryDirectory() as tmp:
        run_dir = Path(tmp) / "20261201-000000-long"
        run_dir.mkdir()
        metrics = make_long_job(run_dir, "long-survey", turns)
        (run_dir / "run.json").write_text(
            json.dumps(
                {
                    "run_id": run_dir.name,
                    "state": "finished",
                    "backend": "offline",
                    "model": "claude-sonnet-5-5",
                    "jobs": [metrics],
                }
            )
        )
        transcript_bytes = (run_dir / "long-survey" / "transcript.jsonl").stat().st_size
        started, cpu = time.perf_counter(), cpu_s()
        result = write_view(run_dir)
        write_s, write_cpu = time.perf_counter() - started, cpu_s() - cpu
        view = result.pages_dir
        job_page = view / "long-survey.html"
        others = sorted(view.glob("long-survey.*.html"), key=lambda p: p.stat().st_size)
        middle = view / f"long-survey.{max(2, (len(others) + 1) // 2)}.html"
        profile = Path(tmp) / "profile"
        start_s = chromium_start_s(profile, rounds) if one_start and CHROMIUM is not None else None
        r = {
            "turns": turns,
            "transcript_bytes": transcript_bytes,
            "write_s": round(write_s, 3),
            "write_cpu_s": round(write_cpu, 3),
            "pages": 1 + len(others),
            "job_page_bytes": job_page.stat().st_size,
            "largest_transcript_page_bytes": others[-1].stat().st_size if others else 0,
            "job_page_open_s": open_s(job_page, profile, rounds, start_s),
            "transcript_page_open_s": open_s(middle, profile, rounds, start_s) if others else None,
        }
        saved = viewer_pages.TRANSCRIPT_PAGE_CHARS
        viewer_pages.TRANSCRIPT_PAGE_CHARS = 10**15  # as before pages: the whole transcript on the job's page
        try:
            whole = Path(tmp) / "whole" / "index.html"
            write_view(run_dir, whole)
        finally:
            viewer_pages.TRANSCRIPT_PAGE_CHARS = saved
        one_page = whole.parent / "view" / "long-survey.html"
        r |= {
            "one_page_bytes": one_page.stat().st_size,
            "one_page_open_s": open_s(one_page, profile, rounds, start_s),
        }
        for key in ("job_page_open_s", "transcript_page_open_s", "one_page_open_s"):
            if r[key] is not None:
                r[key], r[f"{key}_range"] = round(r[key][0], 2), [round(t, 2) for t in r[key][1:]]
        r["rounds"] = rounds
        return r


def long_table(r: dict) -> str:
    def secs(key: str) -> str:
        if r[key] is None:
            return "(no chromium)"
        low, high = r.get(f"{key}_range", (r[key], r[key]))
        return f"{r[key]:.2f} ({low:.2f}-{high:.2f})"

    small = r["job_page_bytes"] < 5 * 2**20 and r["largest_transcript_page_bytes"] < 5 * 2**20
    if r["job_page_open_s"] is None:  # the size target judged, the time not measured
        met = ("sizes met" if small else "sizes MISSED") + "; open time not measured (no chromium)"
    else:
        met = "met" if small and r["job_page_open_s"] < 2 else "MISSED"
    return (
        f"## A {r['turns']:,}-turn job's page\n\n"
        f"One synthetic job shaped as a real offline survey's files ({r['transcript_bytes'] / 2**20:.1f} MiB "
        "of "
        "transcript, a compaction every turn or two). Open: the real headless Chromium's `--dump-dom` wall "
        "time less an empty page's (the browser's start), the median of "
        f"{r.get('rounds', 3)} and, in brackets, the range. Targets: the job's page under 5 MB, opened in "
        "under 2 s.\n\n"
        "| page | size | open s |\n|---|---:|---:|\n"
        f"| the job's page (charts, compactions, report, transcript page 1 of {r['pages']}) | "
        f"{r['job_page_bytes'] / 2**20:.2f} MiB | {secs('job_page_open_s')} |\n"
        f"| a transcript page (the middle one; the largest is "
        f"{r['largest_transcript_page_bytes'] / 2**20:.2f} MiB) | | "
        f"{secs('transcript_page_open_s')} |\n"
        f"| before pages: the whole transcript on the job's page | {r['one_page_bytes'] / 2**20:.1f} MiB | "
        f"{secs('one_page_open_s')} |\n\n"
        f"Writing all {r['pages']} pages: {r['write_s']:.2f} s wall, {r['write_cpu_s']:.2f} s CPU. {met}.\n"
    )


def table(r: dict) -> str:
    def cell(key: str) -> str:
        low, high = r.get(f"{key}_range", (r[key], r[key]))
        return f"{r[key]:.2f} ({low:.2f}-{high:.2f})"

    met = "met" if r["index_s"] < 2 and r["index_bytes"] < 2 * 2**20 else "MISSED"
    return (
        f"## Run viewer: `runner view` of {r['jobs']} jobs x {r['calls_per_job']} model calls\n\n"
        "Synthetic run on disk (every file a real run leaves). Targets: the index written in under 2 s and "
        "under 2 MB.\n\n"
        "| what | wall s | CPU s | size |\n|---|---:|---:|---:|\n"
        f"| index.html alone (read every job's metrics, render, write) | {cell('index_s')} | "
        f"{cell('index_cpu_s')} | "
        f"{r['index_bytes'] / 2**20:.2f} MiB |\n"
        f"| first `runner view` (index + {r['pages_written']} job pages, one process per core) | "
        f"{cell('all_pages_s')} | {cell('all_pages_cpu_s')} | {r['all_pages_bytes'] / 2**20:.1f} MiB in "
        "all |\n"
        f"| `runner view` again, nothing changed ({r['pages_rewritten_again']} pages rewritten) | "
        f"{cell('unchanged_again_s')} | {cell('unchanged_again_cpu_s')} | |\n"
        f"| largest job page (charts, compactions, transcript) | | | {r['largest_page_bytes'] / 2**10:.0f} "
        "KiB |\n\n"
        f"CPU s counts this process and its page workers. {r.get('rounds', 1)} round(s), each on a run made "
        "afresh: the median and, in brackets, the range.\n\n"
        f"Index: {met}. A job page is loaded only when its job is opened.\n"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--smoke", action="store_true")
    args = parser.parse_args()
    result = measure(20, 30, rounds=1) if args.smoke else measure(500, 200)
    result["long_job"] = measure_long(300, rounds=1, one_start=True) if args.smoke else measure_long(3000)
    text = table(result) + "\n" + long_table(result["long_job"])
    print(text)
    if not args.smoke:
        write_result("viewer", result)
        replace_section("viewer", text, "python bench/viewer.py")


if __name__ == "__main__":
    main()
