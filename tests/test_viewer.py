"""``runner view``, ``report --json`` and ``run --json`` on real runs (the offline backend playing scripted
models, real files), and the pages in a real browser (Debian's headless ``chromium``; skipped, with the
reason, where it is absent)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import pytest
from conftest import CHROMIUM, headless_chromium
from markupsafe import escape
from rich.console import Console
from scripted import ScriptedModel, play_instead_of_the_stand_in, reads, scripted_runner

from runner.cli import main
from runner.messages import tool_results
from runner.models.base import Request
from runner.rundir.lock import hold_run_dir
from runner.ui.tables import fitting_table
from runner.ui.viewer import write_view
from runner.ui.viewer.pages import page_name

REPO = Path(__file__).resolve().parent.parent


def cli(*args: str, cwd: Path = REPO, script: Path | None = None) -> subprocess.CompletedProcess:
    """``python -m runner ARGS`` as a real process; with ``script``, its offline model the one saved there."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("ANTHROPIC_", "RUNNER_"))}
    argv = scripted_runner(script, *args) if script else [sys.executable, "-m", "runner", *args]
    return subprocess.run(argv, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


# the two jobs of the shared run: each reads its package's files, one a turn, then reports
RUN_READS = {
    "stdlib-json": ["__init__.py", "decoder.py", "encoder.py", "scanner.py", "tool.py"],
    "stdlib-email": ["message.py", "header.py", "feedparser.py", "headerregistry.py", "utils.py"],
}
# small enough that each job persists its larger results and compacts its context
RUN_LIMITS = "[limits]\nlarge_result_chars = 10000\npreview_chars = 1000\ncontext_char_limit = 30000\n"


@pytest.fixture(scope="module")
def run(tmp_path_factory) -> tuple[subprocess.CompletedProcess, Path]:
    """One real run (a ``runner`` process) of two small jobs on the stdlib's json and email packages, with
    ``--json``, each job's model a script of its own (told apart by its prompt)."""
    root = tmp_path_factory.mktemp("project")
    (root / "config.toml").write_text('[runner]\nbackend = "offline"\n')
    (root / "jobs").mkdir()
    models = {}
    for name, files in RUN_READS.items():
        prompt = f"Survey the {name.split('-')[1]} package."
        (root / "jobs" / f"{name}.toml").write_text(
            f'workspace = "{{stdlib}}/{name.split("-")[1]}"\nprompt = "{prompt}"\n{RUN_LIMITS}'
        )
        models[prompt] = ScriptedModel(reads(files), final=f"# {name}\n\nRead {len(files)} files.")
    script = ScriptedModel([], subagents=models).save(root / "script.json")
    out = tmp_path_factory.mktemp("runs")
    proc = cli("run", "jobs", "--output-dir", str(out), "--json", cwd=root, script=script)
    assert proc.returncode == 0, proc.stderr
    return proc, (out / "latest").resolve()


def test_run_json_is_the_report_document_and_latest_points_at_the_run(run):
    proc, run_dir = run
    assert run_dir.parent.joinpath("latest").is_symlink() and (run_dir / "run.json").is_file()
    document = json.loads(proc.stdout)  # stdout holds the document and nothing else
    report = cli("report", str(run_dir), "--json")
    assert report.returncode == 0
    assert json.loads(report.stdout) == document
    assert re.search(r"2 jobs, 2 succeeded; [\d,]+ in / [\d,]+ out tokens; cost \$\d+\.\d{4}", proc.stderr)
    # each job as its script played it: a turn a read, then its report
    assert {j["job"]: (j["status"], j["turns"]) for j in document["jobs"]} == {
        name: ("succeeded", len(files) + 1) for name, files in RUN_READS.items()
    }
    for name, files in RUN_READS.items():
        assert (run_dir / name / "final.md").read_text().strip() == f"# {name}\n\nRead {len(files)} files."


def test_report_json_of_a_finished_run_has_run_json_fields_and_each_jobs_metrics(run):
    _, run_dir = run
    document = json.loads(cli("report", str(run_dir), "--json").stdout)
    run_json = json.loads((run_dir / "run.json").read_text())
    for key in ("run_id", "state", "backend", "model", "started"):
        assert document[key] == run_json[key]
    assert document["state"] == "finished"
    for job in document["jobs"]:  # ground truth: each job's own metrics.json, read here directly
        metrics = json.loads((run_dir / job["job"] / "metrics.json").read_text())
        assert {k: job[k] for k in metrics} == metrics
    assert document["totals"]["cost_usd"] == pytest.approx(
        sum(
            json.loads((run_dir / j / "metrics.json").read_text())["cost_usd"]
            for j in ("stdlib-json", "stdlib-email")
        )
    )
    assert document["totals"]["succeeded"] == document["totals"]["jobs"] == 2
    for job in document["jobs"]:  # RUN_LIMITS are small enough for the scripts' reads
        assert job["persisted_bytes"] > 0 and sum(job["compactions"].values()) > 0, job


def _in_progress(run_dir: Path, target: Path) -> Path:
    """A copy of a finished run made to look as a run in progress does on disk: run.json lagging behind
    (state running, one job queued, one running at turn 1), a newer metrics.json checkpoint, and a
    half-written last line in events.jsonl."""
    shutil.copytree(run_dir, target)
    doc = json.loads((target / "run.json").read_text())
    doc["state"] = "running"
    doc["jobs"] = [
        {"job": "stdlib-email", "status": "running", "turns": 1},
        {"job": "queued-one", "status": "queued", "turns": 0},
    ]
    (target / "run.json").write_text(json.dumps(doc))
    metrics = json.loads((target / "stdlib-email" / "metrics.json").read_text())
    metrics.update(status="running", turns=7)
    (target / "stdlib-email" / "metrics.json").write_text(json.dumps(metrics))
    (target / "stdlib-json" / "metrics.json").write_text('{"job": "stdlib-json", "status": "runn')  # torn
    with open(target / "stdlib-email" / "events.jsonl", "a") as f:
        f.write('{"stage": "sn')
    return target


def test_report_json_of_a_run_in_progress_shows_each_jobs_live_status(run, tmp_path):
    _, run_dir = run
    live = _in_progress(run_dir, tmp_path / "live")
    with hold_run_dir(live):  # its writer is alive
        proc = cli("report", str(live), "--json")
    assert "Traceback" not in proc.stderr
    assert proc.returncode == 1  # not every job has succeeded (yet)
    document = json.loads(proc.stdout)
    jobs = {j["job"]: j for j in document["jobs"]}
    assert document["state"] == "running"
    assert (
        jobs["stdlib-email"]["status"] == "running" and jobs["stdlib-email"]["turns"] == 7
    )  # metrics.json wins
    assert jobs["queued-one"]["status"] == "queued"
    assert "stdlib-json" in jobs  # found by its directory though run.json does not list it
    assert any("stdlib-json/metrics.json" in p for p in document["problems"])
    assert document["totals"]["running"] == 1 and document["totals"]["queued"] == 1


def test_view_of_a_damaged_run_in_progress_writes_every_page(run, tmp_path):
    _, run_dir = run
    live = _in_progress(run_dir, tmp_path / "live")
    (live / "stdlib-email" / "transcript.jsonl").write_bytes(
        b'{"role": "user", "content": "x"}\n\xff\xfe{"ro'
    )
    with hold_run_dir(live):  # its writer is alive
        result = write_view(live)
    index = result.index.read_text()
    assert "in progress" in index and "queued-one" in index
    page = (live / "view" / page_name("stdlib-email")).read_text()
    assert "half-written last line" in page  # the damage is named on the page, not a traceback
    assert "<polyline" in page


class _Collect(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data):
        self.text.append(data)


def _chromium_dom(page: Path, tmp_path: Path) -> tuple[_Collect, str]:
    """The DOM after scripts ran, and chromium's log (page console messages included)."""
    proc = subprocess.run(
        headless_chromium(
            tmp_path / "profile",
            "--enable-logging=stderr",
            "--log-level=0",
            "--dump-dom",
            page.resolve().as_uri(),
        ),
        capture_output=True,
        text=True,
        timeout=90,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    dom = _Collect()
    dom.feed(proc.stdout)
    return dom, proc.stderr


@pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (`apt-get install chromium`; .ci/run installs it)"
)
def test_the_pages_render_in_a_real_browser(run, tmp_path):
    _, run_dir = run
    result = write_view(run_dir, tmp_path / "run.html")  # --out elsewhere: links still reach the run's files
    dom, log = _chromium_dom(result.index, tmp_path)
    assert not re.search(r"CONSOLE.*(Uncaught|Error)", log), log
    body = next(attrs for tag, attrs in dom.tags if tag == "body")
    assert body.get("data-ready") == "1"  # the table's script ran to its end
    rows = [attrs["data-name"] for tag, attrs in dom.tags if tag == "tr" and "data-name" in attrs]
    assert sorted(rows) == ["stdlib-email", "stdlib-json"]
    assert sum(1 for tag, attrs in dom.tags if tag == "rect" and attrs.get("class") == "bar") == 2
    links = [
        attrs["href"] for tag, attrs in dom.tags if tag == "a" and attrs.get("href", "").endswith(".html")
    ]
    assert len(links) == 2
    job_page = (result.index.parent / links[0]).resolve()
    page, log = _chromium_dom(job_page, tmp_path)
    assert not re.search(r"CONSOLE.*(Uncaught|Error)", log), log
    lines = [attrs for tag, attrs in page.tags if tag == "polyline"]
    assert lines and all(len(a["points"].split()) > 1 for a in lines)  # the context and cost charts are drawn
    events = [json.loads(e) for e in (run_dir / job_page.stem / "events.jsonl").read_text().splitlines()]
    calls = sum(1 for e in events if e["stage"] == "model_call")
    drops = sum(1 for e in events if e["stage"] != "model_call" and "chars_before" in e)
    metrics = json.loads((run_dir / job_page.stem / "metrics.json").read_text())
    assert calls == metrics["turns"] and drops == sum(metrics["compactions"].values())
    assert (
        len(lines[0]["points"].split()) == calls + 2 * drops
    )  # a point per call, and each compaction's drop
    saved = [
        attrs["href"] for tag, attrs in page.tags if tag == "a" and "tool-results/" in attrs.get("href", "")
    ]
    assert saved and all((job_page.parent / h).resolve().is_file() for h in saved)  # links reach the outputs


def test_the_final_table_fits_80_columns_without_breaking_a_word():
    statuses = ["succeeded", "failed", "timeout", "max_turns", "budget_exceeded", "cancelled"]
    jobs = [
        {
            "job": f"nightly-codebase-analysis-{i:03d}-with-a-long-name",
            "status": s,
            "turns": 200,
            "usage": {
                "input_tokens": 12_345_678,
                "output_tokens": 987_654,
                "cache_read_input_tokens": 5_000_000,
                "cache_creation_input_tokens": 100_000,
            },
            "compactions": {"snip": 9, "micro_compact": 40, "compact_history": 3},
            "persisted_bytes": 10**9,
            "cost_usd": 123.456789,
            "wall_s": 3600.5,
            "usage_estimated": True,
            "error": "a long error message that would wrap inside words in a narrow table",
        }
        for i, s in enumerate(statuses)
    ]
    console = Console(width=80, record=True, color_system=None)
    console.print(fitting_table(jobs, "run runs/20261130-010203-abcd", console.width))
    text = console.export_text()
    lines = text.splitlines()
    assert max(len(line) for line in lines) <= 80
    rows = [line for line in lines if line.strip().startswith("nightly")]
    assert len(rows) == len(jobs)  # one line per job: nothing wrapped
    for row, status in zip(rows, statuses, strict=True):
        cells = row.split()
        assert cells[1] in (status, {"succeeded": "ok", "budget_exceeded": "budget"}.get(status))
        assert cells[0].startswith("nightly-codebase-") and cells[0].endswith("…")  # cut, not wrapped
        assert cells[5] == "123.4568" and cells[6] == "3600.5"
    wide = Console(width=300, record=True, color_system=None)
    wide.print(fitting_table(jobs, None, 300))
    assert "a long error message" in wide.export_text()  # with room, the full table with errors


def test_help_describes_positionals_and_exit_codes(capsys):
    for command in ("run", "validate", "resume", "report", "view", "emulate"):
        with pytest.raises(SystemExit) as exit_:
            main([command, "--help"])
        assert exit_.value.code == 0
        text = capsys.readouterr().out
        assert "exit codes:" in text and re.search(r"^\s+2\s+", text, re.M), command
        if command in ("resume", "report", "view"):
            assert re.search(r"RUN_DIR\s+a run directory", text), command
    with pytest.raises(SystemExit):
        main(["--version"])
    assert re.fullmatch(r"runner \d+\.\d+\.\d+\S*\n", capsys.readouterr().out)


def test_view_and_report_of_a_directory_that_is_not_a_run(tmp_path, capsys):
    assert main(["view", str(tmp_path)]) == 2
    assert main(["report", str(tmp_path), "--json"]) == 2
    assert "run.json: not found" in capsys.readouterr().err


def test_serve_renders_the_pages_from_disk_and_serves_only_the_runs_files(run):
    from starlette.testclient import TestClient

    from runner.ui.viewer.serve import create_app

    _, run_dir = run
    client = TestClient(create_app(run_dir), base_url="http://127.0.0.1")
    index = client.get("/")
    assert index.status_code == 200 and "stdlib-json" in index.text and 'http-equiv="refresh"' in index.text
    page = client.get(f"/view/{page_name('stdlib-json')}")
    assert page.status_code == 200 and "<polyline" in page.text
    assert client.get("/stdlib-json/final.md").text == (run_dir / "stdlib-json" / "final.md").read_text()
    assert client.get("/view/nope.html").status_code == 404
    assert client.get("/..%2f..%2fetc/passwd").status_code == 404


def test_the_live_tally_tells_counts_eta_cost_against_the_limit_tokens_and_429s():
    from runner.pricing import Usage
    from runner.rundir.docs import JobMetrics
    from runner.services import RunBudget
    from runner.ui.display import ApiCounts, Tally

    api = ApiCounts()
    tally = Tally(RunBudget(5.0), api)
    progress = {n: JobMetrics(job=n, status="queued") for n in "abcd"}
    tally.start(progress)
    assert "0/4 done" in tally.line() and "ETA -" in tally.line()  # nothing finished: no guess
    progress["a"].status, progress["b"].status = "running", "running"
    tally.job_started(progress["a"])
    tally.job_started(progress["b"])
    progress["a"].cost_usd, progress["a"].usage = 1.25, Usage(input_tokens=1000, output_tokens=100)
    progress["b"].cost_usd, progress["b"].usage.input_tokens = 0.5, 500
    tally.finished(JobMetrics(job="a", status="failed", usage=Usage(input_tokens=1000, output_tokens=100)))
    api()
    api()
    line = tally.line(now=tally.started + 30)  # one of four done in 30 s: three more take 90 s
    assert "1/4 done" in line and "ETA 1:30" in line
    assert "1 failed" in line and "1 running" in line and "2 queued" in line
    assert "$1.7500 of $5" in line and "tokens 1,500 in / 100 out" in line and "429/529 2" in line


def test_the_live_display_renders_active_jobs_and_the_tally():
    from io import StringIO

    from runner.rundir.docs import JobMetrics
    from runner.ui.display import LiveDisplay

    console = Console(file=StringIO(), width=80, force_terminal=True, color_system=None)
    display = LiveDisplay(console)
    progress = {
        "a-very-long-job-name-" * 3: JobMetrics(job="a-very-long-job-name-" * 3, status="running", turns=3),
        "b": JobMetrics(job="b", status="queued"),
    }
    display.tally.start(progress)
    console.print(display._render())
    text = console.file.getvalue()
    assert (
        "a-very-long-job-name-" in text and "0/2 done" in text and "1 queued" in text and "1 running" in text
    )
    assert max(len(line) for line in text.splitlines()) <= 80


def test_text_from_the_run_is_never_markup_on_the_pages(tmp_path):
    name = '<img src=x onerror="alert(1)">'
    job_dir = tmp_path / "run" / name
    job_dir.mkdir(parents=True)
    (job_dir / "metrics.json").write_text(
        json.dumps({"job": name, "status": "failed", "turns": 1, "error": "<script>alert(2)</script>"})
    )
    (job_dir / "final.md").write_text("# Report\n\n<script>alert(3)</script>\n")
    (job_dir / "transcript.jsonl").write_text(json.dumps({"role": "user", "content": "<b>hi</b>"}) + "\n")
    result = write_view(tmp_path / "run")
    pages = [result.index.read_text(), *(p.read_text() for p in result.pages_dir.glob("*.html"))]
    assert len(pages) == 2
    for page in pages:
        assert "<img src=x" not in page and "<script>alert" not in page and "<b>hi" not in page
    assert "&lt;script&gt;alert(3)" in pages[1] and "&lt;img src=x" in pages[0]


# --- a long job's pages --------------------------------------------------------------------------------


def _bench_viewer():
    import importlib.util

    spec = importlib.util.spec_from_file_location("bench_viewer", REPO / "bench" / "viewer.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def long_run(tmp_path_factory) -> Path:
    """A 3,000-turn job's directory as a real survey leaves it (bench/viewer.py writes the files), viewed."""
    run_dir = tmp_path_factory.mktemp("long") / "20261201-000000-long"
    run_dir.mkdir()
    metrics = _bench_viewer().make_long_job(run_dir, "long-survey", 3000)
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
    write_view(run_dir)
    return run_dir


def _lines_shown(html: str) -> list[int]:
    return [int(n) for n in re.findall(r"&middot; line (\d+)</div>", html)]


def test_a_3000_turn_jobs_transcript_is_split_into_pages_of_bounded_size(long_run):
    from runner.ui.viewer.pages import transcript_page_name

    transcript = long_run / "long-survey" / "transcript.jsonl"
    assert transcript.stat().st_size > 30 * 2**20  # the job is as big as the one that made a 44 MB page
    view = long_run / "view"
    main = view / page_name("long-survey")
    assert main.stat().st_size < 5 * 2**20, main.stat().st_size
    pages = sorted(view.glob("long-survey.*.html"), key=lambda p: int(p.name.split(".")[1]))
    assert len(pages) >= 10 and [p.name for p in pages] == [
        transcript_page_name("long-survey", n) for n in range(2, len(pages) + 2)
    ]
    assert max(p.stat().st_size for p in pages) < 2 * 2**20
    shown = [n for page in [main, *pages] for n in _lines_shown(page.read_text())]
    assert shown == list(range(1, len(transcript.read_text().splitlines()) + 1))  # every line once, in order
    text = pages[3].read_text()
    for href in re.findall(r'<a href="([^"#]+)(?:#transcript)?"', text):  # the pager and the links back
        assert (view / href).resolve().is_file(), href
    assert 'rel="prev"' in text and 'rel="next"' in text and "page 5 of" in text


def test_a_transcript_cut_back_loses_its_extra_pages_and_a_huge_block_is_cut(long_run, tmp_path):
    from runner.ui.viewer.pages import TEXT_SHOWN_CHARS

    run_dir = tmp_path / long_run.name
    shutil.copytree(long_run, run_dir, symlinks=True)
    transcript = run_dir / "long-survey" / "transcript.jsonl"
    kept = transcript.read_text().splitlines()[:400]  # a resume cut it back to an earlier turn
    kept.append(json.dumps({"role": "assistant", "content": [{"type": "text", "text": "R" * 100_000}]}))
    transcript.write_text("\n".join(kept) + "\n")
    write_view(run_dir)
    pages = sorted(p.name for p in (run_dir / "view").glob("long-survey.*.html"))
    assert pages == ["long-survey.2.html", "long-survey.3.html"], pages
    last = (run_dir / "view" / pages[-1]).read_text()
    assert "R" * TEXT_SHOWN_CHARS in last and "R" * (TEXT_SHOWN_CHARS + 1) not in last
    assert f"cut at {TEXT_SHOWN_CHARS:,} of 100,000 characters; the whole is on line 401" in last


def test_serve_serves_a_long_transcripts_pages_and_no_other(long_run):
    from starlette.testclient import TestClient

    from runner.ui.viewer.serve import create_app

    client = TestClient(create_app(long_run), base_url="http://127.0.0.1")
    page = client.get("/view/long-survey.2.html")
    assert page.status_code == 200 and "transcript, page 2 of" in page.text
    assert _lines_shown(page.text) == _lines_shown((long_run / "view" / "long-survey.2.html").read_text())
    for missing in (
        "long-survey.1.html",
        "long-survey.02.html",
        "long-survey.999.html",
        "long-survey.x.html",
    ):
        assert client.get(f"/view/{missing}").status_code == 404, missing


@pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (`apt-get install chromium`; .ci/run installs it)"
)
def test_a_3000_turn_jobs_pages_open_in_a_real_browser(long_run, tmp_path):
    dom, log = _chromium_dom(long_run / "view" / page_name("long-survey"), tmp_path)
    assert not re.search(r"CONSOLE.*(Uncaught|Error)", log), log
    assert sum(1 for tag, _ in dom.tags if tag == "polyline") == 3  # context (chars, tokens) and cost
    assert any(tag == "nav" and attrs.get("class") == "pager" for tag, attrs in dom.tags)
    assert "Transcript page 1 of" in "".join(dom.text)
    groups = [attrs for tag, attrs in dom.tags if tag == "g" and attrs.get("class") == "group"]
    assert 0 < len(groups) <= 60 and not [a for tag, a in dom.tags if a.get("class") == "mark"]
    page, log = _chromium_dom(long_run / "view" / "long-survey.7.html", tmp_path)
    assert not re.search(r"CONSOLE.*(Uncaught|Error)", log), log
    assert sum(1 for tag, attrs in page.tags if tag == "div" and "msg" in (attrs.get("class") or "")) > 100


def _long_run_of(base: Path, turns: int) -> Path:
    run_dir = base / f"20261201-000000-long{turns}"
    run_dir.mkdir(parents=True)
    metrics = _bench_viewer().make_long_job(run_dir, "long-survey", turns)
    (run_dir / "run.json").write_text(
        json.dumps({"run_id": run_dir.name, "state": "finished", "backend": "offline", "jobs": [metrics]})
    )
    write_view(run_dir)
    return run_dir


def _pages_bytes(run_dir: Path) -> int:
    return sum(p.stat().st_size for p in (run_dir / "view").rglob("*.html"))


def test_a_long_jobs_page_starts_with_its_report_and_counts_its_compactions(long_run):
    """Issue 36 item 9: the report near the top, the compactions as counts by stage (metrics.json's) with
    their table folded, and a chart of a bounded number of marks, each group's counts on hover."""
    from runner.ui.viewer.charts import MOST_POINTS
    from runner.ui.viewer.pages import MARK_GROUPS, MARKS_SHOWN

    page = (long_run / "view" / page_name("long-survey")).read_text()
    report, chart = page.index('<h2 id="report">Final report</h2>'), page.index("<svg")
    heading, table = page.index("<h2>Compactions ("), page.index('<details class="compactions">')
    assert report < chart < heading < table < page.index('<h2 id="transcript">')
    assert "3000 turns" in page[report:chart]  # final.md's text, rendered
    metrics = json.loads((long_run / "long-survey" / "metrics.json").read_text())
    by_stage = page[heading:table]
    for stage, count in metrics["compactions"].items():
        assert re.search(rf"</i> {stage}</td><td class=\"num\">{count:,}</td>", by_stage), stage
    assert f"<h2>Compactions ({sum(metrics['compactions'].values())})</h2>" in page
    marks, groups = page.count('class="mark"'), page.count('<g class="group">')
    assert marks <= MARKS_SHOWN and 0 < groups <= MARK_GROUPS, (marks, groups)
    group = r'<g class="group"><title>model call ([\d,]+)-([\d,]+): ([\d,]+) compactions \(([^)]*)\)'
    titles = re.findall(group, page)
    counts = [int(t[2].replace(",", "")) for t in titles]
    assert len(titles) == groups and sum(counts) == sum(metrics["compactions"].values())
    for n, t in zip(counts, titles, strict=True):  # each group's counts by stage add up to its count
        assert n == sum(int(k) for k in re.findall(r" (\d+)(?:, |$)", t[3]))
    for points in re.findall(r'<polyline points="([^"]*)"', page):
        assert len(points.split()) <= MOST_POINTS


def test_a_long_jobs_pages_grow_slower_than_its_transcript(long_run, tmp_path):
    """Issue 36 item 9: 4x the turns (and the transcript) is well under 4x the pages' bytes, and no page is
    bigger for a longer job's."""
    short = _long_run_of(tmp_path, 750)
    ratio = (long_run / "long-survey" / "transcript.jsonl").stat().st_size / (
        short / "long-survey" / "transcript.jsonl"
    ).stat().st_size
    assert ratio > 3.8
    long_bytes, short_bytes = _pages_bytes(long_run), _pages_bytes(short)
    assert long_bytes < 2 * short_bytes, (long_bytes, short_bytes)
    assert long_bytes < 0.35 * (long_run / "long-survey" / "transcript.jsonl").stat().st_size
    biggest = max(p.stat().st_size for p in (long_run / "view").rglob("*.html"))
    assert biggest < 1.2 * 2**20, biggest


def test_a_blocks_cut_is_the_longest_that_fits_the_jobs_budget():
    from runner.ui.viewer.pages import fair_cap, fit_shown

    assert fair_cap([10, 100, 1000], 2000) is None
    assert fair_cap([10, 100, 1000], 300) == 190  # 10 + 100 + 190
    assert fair_cap([1000] * 10, 100, floor=30) == 30
    items = [
        {"kind": "message", "blocks": [{"kind": "text", "text": "a" * 50, "cut": False}]},
        {"kind": "message", "blocks": [{"kind": "tool_result", "text": "b" * 5000, "cut": False}]},
        {"kind": "event", "summary": "c" * 5000, "summary_cut": False, "files": []},
    ]
    fitted = fit_shown(items, 1050)
    assert fitted[0] == items[0] and items[1]["blocks"][0]["text"] == "b" * 5000  # nothing changed in place
    assert fitted[1]["blocks"][0] == {"kind": "tool_result", "text": "b" * 500, "cut": True}
    assert fitted[2]["summary"] == "c" * 500 and fitted[2]["summary_cut"]


# --- a job's subagents ---------------------------------------------------------------------------------


def make_subagent_run(base: Path) -> Path:
    """A finished run of one job whose three subagents ran (the second failed), as ``runner run``
    lays it out: run.json, the job's directory, and each subagent's under its ``agents/``. The
    runtime itself ran it, on the model of tests/test_subagents.py that answers by prompt."""
    import anyio
    from test_subagents import ByPrompt
    from test_subagents import job as subagent_job
    from test_subagents import run as run_session

    run_dir = base / "20261202-000000-agents"
    run_dir.mkdir(parents=True)
    session = anyio.run(run_session, subagent_job(base), ByPrompt(tasks=3, fail="part 1"), run_dir / "parent")
    assert session.record.status == "succeeded", session.record.error
    (run_dir / "run.json").write_text(
        json.dumps(
            {
                "run_id": run_dir.name,
                "state": "finished",
                "backend": "offline",
                "model": "claude-sonnet-5-5",
                "jobs": [session.record.document()],
            }
        )
    )
    return run_dir


AGENT_NAMES = ["1-part-0", "2-part-1", "3-part-2"]


@pytest.fixture(scope="module")
def agents_run(tmp_path_factory) -> Path:
    run_dir = make_subagent_run(tmp_path_factory.mktemp("agents"))
    write_view(run_dir)
    return run_dir


def _hrefs(html: str) -> list[str]:
    dom = _Collect()
    dom.feed(html)
    return [attrs["href"] or "" for tag, attrs in dom.tags if tag == "a"]


def _pages(run_dir: Path) -> list[Path]:
    return [run_dir / "index.html", *sorted((run_dir / "view").rglob("*.html"))]


def test_a_jobs_subagents_are_a_tree_on_its_page_each_with_a_page_of_its_own(agents_run):
    from urllib.parse import unquote

    view = agents_run / "view"
    assert sorted(p.name for p in (view / "parent" / "agents").iterdir()) == [
        f"{n}.html" for n in AGENT_NAMES
    ]
    page = (view / page_name("parent")).read_text()
    dom = _Collect()
    dom.feed(page)
    tree = [attrs["data-agent"] for tag, attrs in dom.tags if tag == "li" and "data-agent" in attrs]
    assert tree == AGENT_NAMES
    metrics = json.loads((agents_run / "parent" / "metrics.json").read_text())
    for row in metrics["subagents"]:  # each row as the job's record has it
        item = re.search(rf'<li data-agent="{row["agent"]}">(.*?)</li>', page, re.S)
        assert item is not None
        assert f'href="parent/agents/{row["agent"]}.html"' in item[1] and f">{row['status']}<" in item[1]
        assert f"{row['turns']} turns" in item[1] and f"${row['cost_usd']:.4f}" in item[1]
        assert (str(escape(row["error"])) in item[1]) if row["error"] else "err" not in item[1]
    assert "the subagent&#39;s model failed" in page
    # the task results in its transcript link to their subagents' pages
    assert sum(h.startswith("parent/agents/") for h in _hrefs(page)) == 2 * len(AGENT_NAMES)
    # the index's row: how many, and how many failed
    row = re.search(r'<tr data-name="parent".*?</tr>', (agents_run / "index.html").read_text())
    assert (
        row is not None
        and '<td class="num" data-v="3">3, <span class="status failed">1 failed</span>' in row[0]
    )
    child = (view / "parent" / "agents" / "1-part-0.html").read_text()
    assert "subagent 1-part-0 of job parent" in child and 'href="../../parent.html" rel="up"' in child
    assert "<polyline" in child and "Report on &#39;Read part 0.&#39;: done." in child
    # every link of every page is a file or directory of the run
    root = agents_run.resolve()
    for written in _pages(agents_run):
        for href in _hrefs(written.read_text()):
            target = (written.parent / unquote(href.split("#")[0])).resolve()
            assert target.exists() and (target == root or root in target.parents), (written, href)


def test_a_subagents_page_is_a_full_job_page_with_pages_of_transcript(agents_run, tmp_path, monkeypatch):
    from runner.ui.viewer import pages as viewer_pages

    run_dir = tmp_path / agents_run.name
    shutil.copytree(agents_run, run_dir)
    monkeypatch.setattr(viewer_pages, "TRANSCRIPT_PAGE_CHARS", 300)  # a page a turn
    write_view(run_dir, force=True)
    agents = run_dir / "view" / "parent" / "agents"
    count = len(list(agents.glob("1-part-0*.html")))
    assert count >= 3 and sorted(p.name for p in agents.glob("1-part-0*.html")) == sorted(
        ["1-part-0.html", *(f"1-part-0.{n}.html" for n in range(2, count + 1))]
    )
    second = (agents / "1-part-0.2.html").read_text()
    assert f"transcript, page 2 of {count}" in second and 'href="../../parent.html" rel="up"' in second
    for href in _hrefs(second):
        assert (agents / href.split("#")[0]).resolve().exists(), href
    assert write_view(run_dir).pages_written == 0  # nothing newer than the pages
    (run_dir / "parent" / "agents" / "1-part-0" / "final.md").write_text("A newer report.")
    assert (
        write_view(run_dir).pages_written == 1
    )  # a subagent's file newer than its job's page: both rewritten
    assert "A newer report." in (agents / "1-part-0.html").read_text()
    shutil.rmtree(run_dir / "parent" / "agents" / "3-part-2")  # gone: its pages go too
    write_view(run_dir, force=True)
    assert not list(agents.glob("3-part-2*"))


def test_serve_answers_every_link_of_a_run_with_subagents(agents_run):
    from urllib.parse import urljoin

    from starlette.testclient import TestClient

    from runner.ui.viewer.serve import create_app

    client = TestClient(create_app(agents_run), base_url="http://127.0.0.1")
    seen: dict[str, int] = {}
    todo = ["/"]
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        answer = client.get(path)
        seen[path] = answer.status_code
        if answer.headers.get("content-type", "").startswith("text/html"):
            todo += [urljoin(path, h).split("#")[0] for h in _hrefs(answer.text)]
    assert {p: s for p, s in seen.items() if s != 200} == {}
    assert "/parent" in seen and "/parent/agents/1-part-0" in seen  # the pages' "files" links: a list of them
    for name in AGENT_NAMES:
        assert (
            f"/view/parent/agents/{name}.html" in seen and f"/parent/agents/{name}/transcript.jsonl" in seen
        )
    final = client.get("/parent/agents/1-part-0/final.md")
    assert final.text == (agents_run / "parent" / "agents" / "1-part-0" / "final.md").read_text()
    assert "sandbox" in final.headers["content-security-policy"]
    for missing in (
        "/view/parent/agents/9-none.html",
        "/view/nope/agents/1-part-0.html",
        "/parent/agents/1-part-0/pwn.html",
        "/parent/agents/..%2f..%2frun.json",
        "/parent/agents/9-none",
    ):
        assert client.get(missing).status_code == 404, missing


@pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (`apt-get install chromium`; .ci/run installs it)"
)
def test_subagent_pages_render_in_a_real_browser(agents_run, tmp_path):
    dom, log = _chromium_dom(agents_run / "view" / page_name("parent"), tmp_path)
    assert not re.search(r"CONSOLE.*(Uncaught|Error)", log), log
    tree = [attrs["data-agent"] for tag, attrs in dom.tags if tag == "li" and "data-agent" in attrs]
    assert tree == AGENT_NAMES
    for name in AGENT_NAMES:
        page, log = _chromium_dom(agents_run / "view" / "parent" / "agents" / f"{name}.html", tmp_path)
        assert not re.search(r"CONSOLE.*(Uncaught|Error)", log), log
        text = "".join(page.text)
        assert f"subagent {name} of job parent" in text
        messages = [a for tag, a in page.tags if tag == "div" and "msg" in (a.get("class") or "").split()]
        metrics = json.loads((agents_run / "parent" / "agents" / name / "metrics.json").read_text())
        lines = (agents_run / "parent" / "agents" / name / "transcript.jsonl").read_text().splitlines()
        assert len(messages) == len(lines)
        lines_drawn = [a for tag, a in page.tags if tag == "polyline"]
        if metrics["turns"]:
            assert lines_drawn and all(len(a["points"].split()) == metrics["turns"] for a in lines_drawn)
        else:
            assert not lines_drawn and "No model call recorded yet." in text
        assert any(
            tag == "a" and a.get("rel") == "up" and a.get("href") == "../../parent.html"
            for tag, a in page.tags
        )


def test_hostile_subagent_names_and_texts_are_never_markup_nor_links_out(tmp_path):
    from urllib.parse import unquote

    run_dir = tmp_path / "run"
    name = '<img src=x onerror="alert(1)">'
    agent = run_dir / "j" / "agents" / name
    agent.mkdir(parents=True)
    (agent / "metrics.json").write_text(
        json.dumps({"job": name, "status": "failed", "turns": 1, "error": "<script>alert(2)</script>"})
    )
    (agent / "transcript.jsonl").write_text(json.dumps({"role": "user", "content": "<b>hi</b>"}) + "\n")
    (agent / "final.md").write_text("<script>alert(3)</script>\n")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "metrics.json").write_text(json.dumps({"job": "outside", "status": "succeeded"}))
    (run_dir / "j" / "agents" / "link-out").symlink_to(outside)  # a link out of the run: not a subagent
    rows = [
        {"agent": name, "status": "failed", "turns": 1, "cost_usd": 0.0, "wall_s": 0.0, "error": "x"},
        {
            "agent": "../../<i>up</i>",
            "status": "succeeded",
            "turns": 1,
            "cost_usd": 0.0,
            "wall_s": 0.0,
            "error": None,
        },
    ]
    (run_dir / "j" / "metrics.json").write_text(
        json.dumps({"job": "j", "status": "succeeded", "subagents": rows})
    )
    (run_dir / "j" / "transcript.jsonl").write_text(json.dumps({"role": "user", "content": "go"}) + "\n")
    (run_dir / "run.json").write_text(json.dumps({"state": "finished", "jobs": [{"job": "j"}]}))
    result = write_view(run_dir)
    pages = _pages(run_dir)
    assert len(pages) == 3, pages  # the index, the job's page, one subagent's page
    for page in pages:
        text = page.read_text()
        assert (
            "<img src=x" not in text
            and "<script>alert" not in text
            and "<b>hi" not in text
            and "<i>up" not in text
        )
        assert "link-out" not in text and "outside" not in text
        for href in _hrefs(text):
            target = (page.parent / unquote(href.split("#")[0])).resolve()
            assert target.exists() and run_dir.resolve() in [target, *target.parents], (page, href)
    job_page = (result.pages_dir / page_name("j")).read_text()
    assert (
        "&lt;img src=x" in job_page
        and '../../&lt;i&gt;up&lt;/i&gt; <span class="meta">(no directory)' in job_page
    )
    assert "2 subagents" not in job_page and "Subagents (2)" in job_page


# --- a night in the viewer: an incremental job against its baseline -------------------------------------

HOSTILE_NAME = '<img src=x onerror="alert(1)">.py'
HOSTILE_LINE = "# TODO </pre><script>alert(2)</script>"


def todo_survey(request: Request) -> str:
    """The report of a job that grepped its workspace for TODO: how many files and lines, a table of the
    files, each line quoted (from the newest grep result the request carries)."""
    found = [str(r["content"]) for m in request.messages for r in tool_results(m)][-1]
    hits = [re.fullmatch(r"(.*?):(\d+):(.*)", line) for line in found.splitlines() if line]
    lines = sorted((Path(h[1]).name, int(h[2]), h[3].strip()) for h in hits if h)
    files = sorted({name for name, _, _ in lines})
    table = [f"| {name} | {sum(1 for n, _, _ in lines if n == name)} |" for name in files]
    quoted = [f"- `{name}:{n}: {text}`" for name, n, text in lines]
    return "\n".join(
        ["# Survey", "", f"{len(files)} files with TODOs, {len(lines)} TODO lines.", ""]
        + ["| file | TODOs |", "|---|---|", *table, "", "## TODOs", "", *quoted]
    )


@pytest.fixture(scope="module")
def nights(tmp_path_factory) -> tuple[Path, Path]:
    """Two real offline nights of two incremental jobs (``survey``, whose workspace gains a file with a
    hostile name and a hostile TODO line between them, and ``steady``, whose does not), night two viewed;
    each job greps its workspace for TODO and reports what it found (:func:`todo_survey`).
    Returns the two run directories."""
    from conftest import run_cli_once

    root = tmp_path_factory.mktemp("nights")
    for ws in ("ws", "still"):
        (root / ws).mkdir()
        (root / ws / "a.py").write_text('"""A module."""\n\nx = 1  # TODO: one\n')
    (root / "config.toml").write_text('[runner]\nbackend = "offline"\n')
    (root / "jobs").mkdir()
    for name, ws in (("survey", "ws"), ("steady", "still")):
        (root / "jobs" / f"{name}.toml").write_text(
            f'workspace = "../{ws}"\nprompt = "Survey the workspace."\nincremental = true\n'
        )
    with pytest.MonkeyPatch.context() as patch:
        play_instead_of_the_stand_in(patch, ScriptedModel([("grep", {"pattern": "TODO"})], final=todo_survey))
        first = run_cli_once("run", "jobs", cwd=root)
        assert first.returncode == 0, first.stderr
        night_one = (root / "runs" / "latest").resolve()
        (root / "ws" / HOSTILE_NAME).write_text(f"y = 2\n{HOSTILE_LINE}\n")
        second = run_cli_once("run", "jobs", cwd=root)
    assert second.returncode == 0, second.stderr
    night_two = (root / "runs" / "latest").resolve()
    assert "survey: incremental from run " + night_one.name in second.stderr
    viewed = run_cli_once("view", str(night_two), cwd=root)
    assert viewed.returncode == 0, viewed.stderr
    return night_one, night_two


def test_a_nights_job_page_shows_its_report_against_its_baselines(nights):
    """Issue 37 item 4: the diff ``runner diff`` makes of the job's report against its baseline's, on the
    job's page under its report, the baseline run linked; a report that did not change says so."""
    from runner.ui.diff import diff_runs

    night_one, night_two = nights
    metrics = json.loads((night_two / "survey" / "metrics.json").read_text())
    assert metrics["incremental"]["baseline"] == night_one.name
    page = (night_two / "view" / page_name("survey")).read_text()
    report, since = page.index('<h2 id="report">'), page.index('<h2 id="since">')
    assert report < since < page.index("<svg")  # the report, then what changed in it
    expected = {j.job: j for j in diff_runs(night_one, night_two, warn=None).jobs}
    assert expected["survey"].report_changed and not expected["steady"].report_changed
    # the script's report: the new file's row added to its table, its TODO line quoted, the counts changed
    assert (expected["survey"].unit, expected["survey"].added) == ("rows", [HOSTILE_NAME])
    assert not expected["survey"].removed and not expected["survey"].changed
    changes = expected["survey"].diff.splitlines()
    assert [c for c in changes if c[:1] in "+-" and not c.startswith(("+++", "---"))] == [
        "-1 files with TODOs, 1 TODO lines.",
        "+2 files with TODOs, 2 TODO lines.",
        f"+| {HOSTILE_NAME} | 1 |",
        f"+- `{HOSTILE_NAME}:2: {HOSTILE_LINE}`",
    ]
    shown = re.findall(r'<span class="(add|del|hunk|file|ctx)">(.*)</span>', page[since:])
    lines = expected["survey"].diff.splitlines()
    assert [text for _, text in shown] == [str(escape(line)) for line in lines]
    assert [kind for kind, text in shown if text.startswith("+") and not text.startswith("+++")] == [
        "add"
    ] * sum(1 for line in lines if line.startswith("+") and not line.startswith("+++"))
    assert str(escape(f"+- `{HOSTILE_NAME}:2: {HOSTILE_LINE}`")) in page  # the new TODO, as text
    assert (
        f"{len(expected['survey'].added)} row" in page and '<b class="changed">Its report changed</b>' in page
    )
    [href] = re.findall(r'<a href="([^"]+)" class="baseline">', page)
    assert (night_two / "view" / href).resolve() == night_one  # relative, to the baseline run
    steady = (night_two / "view" / page_name("steady")).read_text()
    assert "Its report is the baseline's, unchanged." in steady and '<pre class="diff">' not in steady


def test_a_nights_index_marks_the_changed_reports_and_links_the_baseline_run(nights, tmp_path):
    night_one, night_two = nights
    index = (night_two / "index.html").read_text()
    marks = dict(
        re.findall(r'<tr data-name="([^"]+)" data-status="succeeded" data-changed="(yes|no)">', index)
    )
    assert marks == {"survey": "yes", "steady": "no"}
    assert index.count('<span class="changed" title="its report changed since its baseline') == 1
    assert "2 incremental jobs from run" in index and "1 report changed</b> since" in index
    [href] = re.findall(r'<a href="([^"]+)" class="baseline" rel="prev">', index)
    assert (
        not href.startswith("/") and (night_two / href).resolve() == night_one
    )  # not viewed yet: its directory

    write_view(night_one)  # once the baseline has its pages, the link goes to its index
    write_view(night_two)
    [href] = re.findall(r'<a href="([^"]+)" class="baseline"', (night_two / "index.html").read_text())
    assert href.endswith("index.html") and (night_two / href).resolve() == night_one / "index.html"

    alone = tmp_path / "elsewhere" / night_two.name  # the baseline pruned: named, not linked, no diff
    shutil.copytree(night_two, alone, symlinks=True)
    write_view(alone, force=True)
    index = (alone / "index.html").read_text()
    assert 'class="baseline"' not in index and "(no longer a run beside this one)" in index
    assert "data-changed" not in index
    page = (alone / "view" / page_name("survey")).read_text()
    assert "no longer a run beside this one, so there is nothing to compare with" in page
    assert '<pre class="diff">' not in page


@pytest.mark.skipif(
    CHROMIUM is None, reason="no chromium on PATH (`apt-get install chromium`; .ci/run installs it)"
)
def test_a_nights_pages_render_the_diff_and_marks_in_a_real_browser(nights, tmp_path):
    """The night's job page in headless Chromium: the diff drawn line by line, the hostile file name and
    TODO line text (no element of theirs, no script run); the index's marks and its script."""
    _, night_two = nights
    page, log = _chromium_dom(night_two / "view" / page_name("survey"), tmp_path)
    assert not re.search(r"CONSOLE.*(Uncaught|Error)", log), log
    assert not [tag for tag, _ in page.tags if tag in ("script", "img", "iframe")]
    assert any(tag == "pre" and attrs.get("class") == "diff" for tag, attrs in page.tags)
    kinds = [attrs.get("class") for tag, attrs in page.tags if tag == "span"]
    assert kinds.count("add") == 3 and kinds.count("del") == 1 and "hunk" in kinds  # the script's report
    text = "".join(page.text)
    assert f"+- `{HOSTILE_NAME}:2: {HOSTILE_LINE}`" in text and "Its report changed" in text
    index, log = _chromium_dom(night_two / "index.html", tmp_path)
    assert not re.search(r"CONSOLE.*(Uncaught|Error)", log), log
    assert next(attrs for tag, attrs in index.tags if tag == "body").get("data-ready") == "1"
    changed = [a.get("data-name") for tag, a in index.tags if tag == "tr" and a.get("data-changed") == "yes"]
    assert changed == ["survey"]
    assert sum(1 for tag, a in index.tags if tag == "a" and a.get("class") == "baseline") == 1
