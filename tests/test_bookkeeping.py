"""A batch's bookkeeping per event is O(1) in its jobs: run.json's rows made when they change (and the
document they give the same as one made from every record), the progress tally kept from starts and ends.

This holds with any model: no model is called here; the batches are given a scripted one
(``tests/scripted.py``)."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import anyio
from scripted import ScriptedModel

from runner.compaction.compactor import Compactor
from runner.compaction.summarizer import Summarizer
from runner.config import Limits
from runner.execution import core
from runner.execution.core import Batch, RunJson
from runner.jobs import JobError, JobSpec
from runner.pricing import Usage
from runner.rundir.docs import JobMetrics, run_json_text
from runner.ui.display import ApiCounts, Tally


def spec(name: str, tmp: Path) -> JobSpec:
    return JobSpec(
        name=name,
        source=tmp / f"{name}.toml",
        prompt="Survey it.",
        workspace=tmp,
        model="claude-sonnet-4-5",
        tools=("read", "glob", "grep"),
        limits=Limits(),
    )


def batch(tmp: Path, names: list[str]) -> Batch:
    return Batch(
        run_dir=tmp / "run",
        specs=[spec(n, tmp) for n in names],
        model=ScriptedModel([]),
        compactor=Compactor(Summarizer(None, "claude-haiku-4-5")),
        summary_model="claude-haiku-4-5",
        concurrency=2,
        errors=[JobError("broken", tmp / "broken.toml", ("no prompt",))],
        kept={"earlier": JobMetrics(job="earlier", status="succeeded", turns=7, cost_usd=0.25)},
        meta={"backend": "offline"},
        handle_signals=False,
    )


def same(run_json: RunJson) -> None:
    """run.json from the rows kept is what a document made from every record gives (but its time)."""
    fast = json.loads(run_json.text())
    slow = json.loads(run_json_text(run_json.document()))
    fast.pop("updated"), slow.pop("updated")
    assert fast == slow


def test_run_json_rows_follow_starts_turns_and_ends(tmp_path: Path) -> None:
    names = ["a", "b", "c", "d"]
    b = batch(tmp_path, names)
    progress = {n: JobMetrics(job=n, status="queued") for n in names}
    run_json = RunJson(b, progress)
    run_json.ended("broken", JobMetrics(job="broken", status="failed", error="no prompt"))
    same(run_json)
    run_json.job_started("a")
    progress["a"].status, progress["a"].turns = "running", 3
    same(run_json)
    progress["a"].turns = 4  # a turn later: its live row moves
    doc = json.loads(run_json.text())
    assert next(j for j in doc["jobs"] if j["job"] == "a")["turns"] == 4
    assert doc["totals"]["running"] == 1 and doc["totals"]["queued"] == 3
    progress["a"].status, progress["a"].cost_usd = "succeeded", 0.5
    progress["a"].usage = Usage(input_tokens=100, output_tokens=10)
    run_json.ended("a", progress["a"])
    same(run_json)
    doc = json.loads(run_json.text())
    assert doc["totals"]["succeeded"] == 2 and doc["totals"]["cost_usd"] == 0.75
    assert doc["totals"]["input_tokens"] == 100 and doc["totals"]["failed"] == 1
    row = next(j for j in doc["jobs"] if j["job"] == "a")
    assert row["source"] == str((tmp_path / "a.toml").absolute()) and row["usage"]["input_tokens"] == 100
    again = JobMetrics(job="a", status="failed", cost_usd=1.0)  # a result replaced: counted once, as the last
    run_json.ended("a", again)
    same(run_json)
    assert json.loads(run_json.text())["totals"]["cost_usd"] == 1.25


def test_an_ended_row_is_serialized_once(tmp_path: Path, monkeypatch) -> None:
    names = [f"j{i}" for i in range(50)]
    b = batch(tmp_path, names)
    progress = {n: JobMetrics(job=n, status="queued") for n in names}
    run_json = RunJson(b, progress)
    for n in names:
        progress[n].status = "succeeded"
        run_json.ended(n, progress[n])
    made = []
    real = JobMetrics.model_validate

    def counting(*args, **kwargs):
        made.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(JobMetrics, "model_validate", counting)
    for _ in range(5):
        run_json.text()
    assert made == []  # the rows were made when the jobs ended, not at each write


def test_the_rewrite_is_rate_bound_by_its_own_cost(tmp_path: Path, monkeypatch) -> None:
    b = batch(tmp_path, ["a"])
    b.run_dir.mkdir()
    run_json = RunJson(b, {"a": JobMetrics(job="a", status="queued")})
    real_text = run_json.text

    def slow_text() -> str:
        time.sleep(0.05)  # a 50 ms rewrite: the next waits 50 times that
        return real_text()

    monkeypatch.setattr(run_json, "text", slow_text)
    writes = []
    monkeypatch.setattr(core, "write_atomic", lambda path, text: _record(writes, text))

    async def main() -> None:
        await run_json.write(force=True)
        await anyio.sleep(core.MIN_INTERVAL_S + 0.1)
        await run_json.write()  # past MIN_INTERVAL_S, within 50 x 50 ms: not written
        await run_json.write(force=True)  # the last write is never skipped

    anyio.run(main)
    assert len(writes) == 2


async def _record(writes: list[str], text: str) -> None:
    writes.append(text)


def test_the_tally_counts_from_starts_and_ends_without_a_scan() -> None:
    tally = Tally(None, ApiCounts())
    progress = {f"j{i}": JobMetrics(job=f"j{i}", status="queued") for i in range(1000)}
    tally.start(progress)
    for i in range(3):
        tally.job_started(progress[f"j{i}"])
    progress["j0"].cost_usd = 0.5
    progress["j0"].status = "succeeded"
    tally.finished(progress["j0"])
    line = tally.line()
    assert "1/1000 done" in line and "2 running" in line and "997 queued" in line and "$0.5000" in line
    tally.finished(JobMetrics(job="j0", status="failed"))  # told twice: counted once, as the last
    line = tally.line()
    assert "1 failed" in line and "succeeded" not in line and "1/1000 done" in line

    class Exploding(dict):
        def values(self):  # a line must not look at every job
            raise AssertionError("scanned every job")

        def items(self):
            raise AssertionError("scanned every job")

        def __iter__(self):
            raise AssertionError("scanned every job")

    tally.progress = Exploding(progress)
    assert "2 running" in tally.line()  # and it did not look at the 1,000 jobs
    assert tally.eta_s() is not None


def test_the_tally_adds_up_the_running_jobs_spend_at_most_every_half_second() -> None:
    from runner.ui.display import RUNNING_SUM_S

    tally = Tally(None, ApiCounts())
    progress = {f"j{i}": JobMetrics(job=f"j{i}", status="queued") for i in range(3)}
    tally.start(progress)
    for job in progress.values():
        tally.job_started(job)
        job.cost_usd = 1.0
    t = tally.started
    assert "$3.0000" in tally.line(now=t)
    progress["j1"].cost_usd = 2.0  # spent more since the sum
    assert "$3.0000" in tally.line(now=t + RUNNING_SUM_S / 2)  # not added up again yet
    progress["j2"].status = "succeeded"
    tally.finished(progress["j2"])  # its share moves to the ended jobs': counted once, as it ended
    assert "$3.0000" in tally.line(now=t + RUNNING_SUM_S / 2)
    assert "$4.0000" in tally.line(now=t + RUNNING_SUM_S)  # added up again: j0 1 + j1 2 + j2 1


def test_a_big_run_gets_its_table_as_plain_lines_that_fit_80_columns() -> None:
    from io import StringIO

    from rich.console import Console

    from runner.ui.tables import PLAIN_ROWS, PlainTable, fitting_table

    rows = [
        {
            "job": f"j{i:05d}",
            "status": "succeeded",
            "turns": 5,
            "usage": {"input_tokens": 7400},
            "cost_usd": 0.04,
        }
        for i in range(PLAIN_ROWS + 1)
    ]
    rows[1] |= {"job": "[bold]x[/bold]\x1b[31m-a-name-longer-than-the-column", "status": "not_started"}
    rows[2] |= {"subagents": [{"status": "succeeded"}, {"status": "failed"}], "compactions": {"snip": 2}}
    table = fitting_table(rows, None, 80)
    assert isinstance(table, PlainTable)
    assert "error" not in [c.header for c in table.columns]  # the errors follow as lines of their own
    console = Console(file=StringIO(), width=80, force_terminal=True, color_system=None)
    console.print(table)
    lines = console.file.getvalue().splitlines()
    assert len(lines) == 1 + len(rows) + 1 + 1  # header, rows, one subagent note, caption
    assert max(len(line) for line in lines) <= 80
    assert lines[0].split() == ["job", "status", "turns", "tok", "in/out", "cmp", "cost", "$", "wall", "s"]
    assert lines[1].split() == ["j00000", "ok", "5", "7.4k/0", "0", "0.0400", "0.0"]
    assert lines[2].startswith("[bold]x[/bold]\\x1b[31…") and "not_started" in lines[2]  # never markup
    assert (
        lines[3].split()[:5] == ["j00002", "ok", "5", "7.4k/0", "2"] and lines[4] == "2 subagents, 1 failed"
    )
    assert fitting_table(rows[:PLAIN_ROWS], None, 80).__class__.__name__ == "Table"


def test_a_long_jobs_page_lists_and_marks_a_bounded_number_of_compactions(tmp_path: Path) -> None:
    from runner.ui.viewer import pages
    from runner.ui.viewer.render import write_view

    run_dir = tmp_path / "20261201-000000-long"
    job = run_dir / "long"
    job.mkdir(parents=True)
    many = pages.COMPACTIONS_SHOWN * 3
    events, transcript = [], [{"role": "user", "content": "Survey it."}]
    for turn in range(1, many + 1):
        events.append(
            {"ts": turn, "stage": "micro_compact", "messages_before": 9, "messages_after": 9}
            | {"chars_before": 9_000 + turn, "chars_after": 6_000}
        )
        events.append(
            {"ts": turn, "stage": "model_call", "turn": turn, "chars": 9_000, "tokens": 2_250}
            | {"estimated": True, "cost_usd": 0.001 * turn}
        )
        transcript.append({"role": "assistant", "content": [{"type": "text", "text": f"turn {turn}"}]})
    (job / "events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    (job / "transcript.jsonl").write_text("".join(json.dumps(m) + "\n" for m in transcript))
    metrics = {"job": "long", "status": "succeeded", "turns": many, "compactions": {"micro_compact": many}}
    (job / "metrics.json").write_text(json.dumps(metrics))
    (run_dir / "run.json").write_text(
        json.dumps({"run_id": run_dir.name, "state": "finished", "jobs": [metrics]})
    )
    page = (write_view(run_dir).pages_dir / "long.html").read_text()
    assert f"Compactions ({many})" in page
    table = page[page.index('<details class="compactions">') : page.index("<h2>Memory files")]
    assert table.count("<tr><td") == pages.COMPACTIONS_SHOWN
    assert f"the other {many - pages.COMPACTIONS_SHOWN:,} are each in the transcript" in table
    assert page.count('class="mark"') == 0 and 0 < page.count('class="group"') <= pages.MARK_GROUPS
    assert f"count its {many:,} compactions per 50 model calls" in page  # 1,500 calls in 30 groups of 50
    assert "model call 51-100: 50 compactions (micro_compact 50)" in page


def test_the_live_displays_refresh_thread_reads_the_tally_while_the_loop_starts_and_ends_jobs() -> None:
    """rich refreshes the live display from a thread of its own; a tally that walked its running jobs
    while the loop changed them raised (dictionary changed during iteration) and the display froze."""
    n = 3000
    progress = {f"j{i}": JobMetrics(job=f"j{i}", status="queued") for i in range(n)}
    tally = Tally()
    tally.start(progress)
    for p in progress.values():
        p.started = time.time() - 10
        tally.job_started(p)
    first = progress["j0"].model_copy(update={"status": "succeeded", "wall_s": 100.0})
    tally.finished(first)
    errors: list[BaseException] = []
    stop = threading.Event()

    def refresh() -> None:  # as rich's refresh thread: the tally line, the running sums again each time
        while not stop.is_set():
            try:
                tally.line()
                tally.active()
                tally._summed_at = None
            except RuntimeError as e:
                errors.append(e)
                return

    thread = threading.Thread(target=refresh)
    thread.start()
    names, i, end = list(progress)[1:], 0, time.monotonic() + 3
    while time.monotonic() < end and not errors:
        name = names[i % len(names)]
        i += 1
        tally.running.pop(name, None)  # a job ends, another starts: the loop's side
        tally.running[name] = progress[name]
        time.sleep(0.0005)
    stop.set()
    thread.join()
    assert errors == []
