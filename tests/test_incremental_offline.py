"""The offline model works incrementally: two nights through ``runner run`` on a copy of real standard
library packages, files added, changed and removed between them. The second night's report has a fresh
survey's facts (every row, the totals and tables, the TODO count and places), it reads only the files added
or changed, and its record states its cost against the baseline's; nothing changed means nothing read; an
unusable baseline means a full survey, with the reason; an incremental night cut back and resumed ends
with the report of the uninterrupted night.

These are the stand-in's own tests (its survey's decisions). What holds with any model (the baseline
found or refused with its reason, the record and its costs, the subagents carried over, a killed night's
resume) is checked on a scripted model in ``tests/test_incremental.py``."""

from __future__ import annotations

import json
import re
import shutil
import sysconfig
from pathlib import Path
from typing import Any

import pytest
from conftest import survey_rows, survey_todos

from runner.rundir.docs import MANIFEST

pytestmark = pytest.mark.stand_in

STDLIB = Path(sysconfig.get_paths()["stdlib"])
SMALL = ("email", "json")  # 35 files: the report lists every row
BIG = ("email", "json", "encodings", "asyncio", "xml")  # over 200: the rows are in the facts files
TODO = re.compile(r"\b(TODO|FIXME|XXX)\b")
PROMPT = "Survey this package."


def project(root: Path, packages: tuple[str, ...], limits: str = "") -> Path:
    """A project on the offline model: a copy of ``packages`` and an incremental survey job of it."""
    ws = root / "ws"
    for name in packages:
        shutil.copytree(STDLIB / name, ws / name, ignore=shutil.ignore_patterns("__pycache__"))
    (root / "jobs").mkdir()
    (root / "jobs" / "survey.toml").write_text(
        f'prompt = "{PROMPT}"\nworkspace = "../ws"\nincremental = true\n'
        f'outputs = ["memories/survey/facts-*.md"]\n[limits]\nmax_turns = 2000\n{limits}'
    )
    (root / "config.toml").write_text('[runner]\noutput_dir = "runs"\nbackend = "offline"\n')
    return ws


def change(ws: Path) -> dict[str, set[str]]:
    """Files added, changed and removed, some with TODO lines and some without; the paths of each."""
    files = sorted(p.relative_to(ws).as_posix() for p in ws.rglob("*.py"))
    with_todo = [p for p in files if TODO.search((ws / p).read_text(errors="replace"))]
    without = [p for p in files if p not in with_todo]
    (ws / "email" / "nightly.py").write_text('"""Added tonight."""\n\ndef f():\n    pass  # TODO: test it\n')
    shutil.copy(ws / "json" / "decoder.py", ws / "json" / "decoder_copy.py")
    changed = [with_todo[0], without[0], without[1]]
    with (ws / changed[0]).open("a") as f:
        f.write("# FIXME: a new line\n")
    with (ws / changed[1]).open("a") as f:
        f.write("# XXX: its first such line\n")
    with (ws / changed[2]).open("a") as f:
        f.write("def added_tonight():\n    return 1\n")
    removed = [with_todo[1], without[2]]
    for path in removed:
        (ws / path).unlink()
    return {
        "added": {"email/nightly.py", "json/decoder_copy.py"},
        "changed": set(changed),
        "removed": set(removed),
    }


def night(run_cli: Any, root: Path, *args: str) -> tuple[Path, dict]:
    done = run_cli("run", "jobs", "--json", *args, cwd=root)
    assert done.returncode == 0, done.stderr
    doc = json.loads(done.stdout)
    return Path(doc["run_dir"]) / "survey", doc["jobs"][0]


def calls(job: Path, name: str) -> list[dict]:
    return [
        b["input"]
        for line in (job / "transcript.jsonl").read_text().splitlines()
        if (m := json.loads(line))["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "tool_use" and b["name"] == name
    ]


def said(job: Path) -> str:
    """What the job's turns said besides their calls (its first reply's text)."""
    for line in (job / "transcript.jsonl").read_text().splitlines():
        message = json.loads(line)
        if message["role"] == "assistant" and isinstance(message["content"], list):
            return str(message["content"][0].get("text", ""))
    return ""


def head(report: str) -> str:
    """The totals and tables (what comes before the TODO lines), without the line on the baseline."""
    text = report.split("\n## TODO", 1)[0]
    kept = [
        line for line in text.split("\n") if not line.startswith(("Incremental survey:", "A full survey:"))
    ]
    return re.sub(r"\n{3,}", "\n\n", "\n".join(kept))


def todo_head(report: str) -> list[str]:
    return re.findall(r"^## TODO / FIXME / XXX \(.*$", report, re.M)


def assert_same_facts(job: Path, other: Path) -> None:
    """``job``'s report has ``other``'s facts: rows, totals and tables, TODO count and places."""
    a, b = (job / "final.md").read_text(), (other / "final.md").read_text()
    rows = survey_rows(a, job)
    assert rows and rows == survey_rows(b, other)
    assert head(a) == head(b)
    assert todo_head(a) == todo_head(b)
    assert survey_todos(a, job) == survey_todos(b, other)


@pytest.mark.parametrize("packages", [SMALL, BIG], ids=["small", "big"])
def test_the_second_night_has_a_fresh_surveys_facts_and_reads_only_what_changed(
    run_cli: Any, tmp_path: Path, packages: tuple[str, ...]
) -> None:
    ws = project(tmp_path, packages)
    first, first_doc = night(run_cli, tmp_path)
    assert "Incremental survey" not in (first / "final.md").read_text()
    changes = change(ws)
    second, doc = night(run_cli, tmp_path)
    fresh, fresh_doc = night(run_cli, tmp_path, "--fresh")

    record = doc["incremental"]
    assert (record["baseline"], record["files_added"], record["files_changed"], record["files_removed"]) == (
        first.parent.name,
        2,
        3,
        2,
    )
    on_disk = json.loads((second / "metrics.json").read_text())["incremental"]
    assert on_disk["baseline_cost_usd"] == round(first_doc["cost_usd"], 6)  # its cost, against the baseline's
    share = 0.35 if packages == BIG else 0.9  # 7 of its files in 35 changed, a few turns of its own
    assert (
        doc["cost_usd"] < share * on_disk["baseline_cost_usd"]
        and doc["cost_usd"] < share * fresh_doc["cost_usd"]
    )

    assert_same_facts(second, fresh)
    report = (second / "final.md").read_text()
    assert (
        f"Incremental survey: 2 files added, 3 changed and 2 removed since run {first.parent.name}; only "
        "the 5 added or changed are read"
    ) in said(second)
    read = [c["file_path"] for c in calls(second, "read")]
    assert sorted(read) == sorted(changes["added"] | changes["changed"])  # each once, nothing unchanged
    searched = {
        c["path"] for c in calls(second, "grep") if "path" in c and c["pattern"].startswith(r"\b(TODO")
    }
    assert searched >= changes["added"] | changes["changed"]
    assert not any(path in changes["removed"] for path in survey_rows(report, second))


def test_a_night_with_no_change_reads_nothing_and_says_so(run_cli: Any, tmp_path: Path) -> None:
    project(tmp_path, BIG)
    first, _ = night(run_cli, tmp_path)
    second, doc = night(run_cli, tmp_path)
    assert f"Incremental survey: nothing changed since run {first.parent.name}; no file is read" in said(
        second
    )
    assert not calls(second, "read") and not calls(second, "grep") and not calls(second, "glob")
    assert_same_facts(second, first)
    assert (second / "final.md").read_text() == (
        first / "final.md"
    ).read_text()  # the whole report, unchanged
    assert run_cli("diff", str(first.parent), str(second.parent), cwd=tmp_path).returncode == 0
    assert doc["turns"] <= 3 and doc["cost_usd"] < 0.02 * doc["incremental"]["baseline_cost_usd"]


def test_no_change_in_a_small_tree_lists_every_row(run_cli: Any, tmp_path: Path) -> None:
    project(tmp_path, SMALL)
    first, _ = night(run_cli, tmp_path)
    second, _ = night(run_cli, tmp_path)
    assert not calls(second, "read")
    assert "## Every file\n\n| file | lines |" in (second / "final.md").read_text()
    assert (second / "final.md").read_text() == (first / "final.md").read_text()
    assert_same_facts(second, first)


def test_a_baseline_the_runtime_cannot_use_means_a_full_run_with_its_reason(
    run_cli: Any, tmp_path: Path
) -> None:
    ws = project(tmp_path, SMALL)
    first, _ = night(run_cli, tmp_path)
    (first / MANIFEST).write_text('{"manifest": 1, "created": 5, "entries": 9}\n{"path"\n')  # damaged
    change(ws)
    second, doc = night(run_cli, tmp_path)
    assert doc["incremental"]["baseline"] is None and "damaged" in doc["incremental"]["fresh"]
    report = (second / "final.md").read_text()
    assert "A full survey" not in report
    fresh, _ = night(run_cli, tmp_path, "--fresh")
    assert_same_facts(second, fresh)


def test_a_baseline_without_survey_facts_means_a_full_survey_saying_why(run_cli: Any, tmp_path: Path) -> None:
    ws = project(tmp_path, SMALL)
    first, _ = night(run_cli, tmp_path)
    for facts in (first / "memories" / "survey").glob("facts-*.md"):
        facts.unlink()
    changes = change(ws)
    second, doc = night(run_cli, tmp_path)
    assert doc["incremental"]["baseline"] == first.parent.name  # the runtime took it: the survey could not
    report = (second / "final.md").read_text()
    assert (
        f"A full survey: run {first.parent.name} is this job's baseline, but its memory holds no survey facts"
    ) in report
    assert len(calls(second, "read")) >= len(survey_rows(report, second)) > len(changes["added"])
    fresh, _ = night(run_cli, tmp_path, "--fresh")
    assert_same_facts(second, fresh)


def test_unchanged_importers_of_a_changed_module_are_carried_over_not_read(
    run_cli: Any, tmp_path: Path
) -> None:
    """Night two's note names 5 unchanged files that import the changed module: the survey reads the
    changed one only and costs at most twice a night whose change no file imports."""
    nights = {}
    for imports in ("core", "other"):
        root = tmp_path / imports
        ws = root / "ws"
        (ws / "lib").mkdir(parents=True)
        for name in ("core", "other"):
            (ws / "lib" / f"{name}.py").write_text(f'"""{name}."""\n\n\ndef {name}():\n    return 1\n')
        for i in range(5):
            (ws / f"user_{i}.py").write_text(f"from lib.{imports} import {imports}\n\nx = {imports}()\n")
        for i in range(23):
            (ws / "lib" / f"leaf_{i:02d}.py").write_text(f"def leaf_{i}():\n    return {i}\n")
        (root / "jobs").mkdir()
        (root / "jobs" / "survey.toml").write_text(
            f'prompt = "{PROMPT}"\nworkspace = "../ws"\nincremental = true\n'
        )
        (root / "config.toml").write_text('[runner]\noutput_dir = "runs"\nbackend = "offline"\n')
        night(run_cli, root)
        with (ws / "lib" / "core.py").open("a") as f:
            f.write("\n\ndef more():\n    return 3\n")
        nights[imports] = night(run_cli, root)
    (second, doc), (_, plain) = nights["core"], nights["other"]
    assert doc["incremental"]["files_dependent"] == 5 and plain["incremental"]["files_dependent"] == 0
    assert [c["file_path"] for c in calls(second, "read")] == ["lib/core.py"]
    assert 0 < doc["cost_usd"] <= 2 * plain["cost_usd"], (doc["cost_usd"], plain["cost_usd"])


def test_the_change_lists_are_read_back_up_to_the_dependents_pairs_only(run_cli: Any, tmp_path: Path) -> None:
    """300 unchanged files import a changed module: the saved changes end with 300 pairs (some 12 KB,
    pages of them). The survey reads the lists of changes back (to look files up, then to queue its
    reads) and stops at the pairs' heading: no recall of that file starts past it."""
    root = tmp_path / "p"
    ws = root / "ws"
    (ws / "lib").mkdir(parents=True)
    (ws / "lib" / "core.py").write_text('"""core."""\n\n\ndef core():\n    return 1\n')
    for i in range(300):
        (ws / f"app_{i // 30}").mkdir(exist_ok=True)
        (ws / f"app_{i // 30}" / f"user_{i:03d}.py").write_text("from lib.core import core\n\nx = core()\n")
    (root / "jobs").mkdir()
    task = f'prompt = "{PROMPT}"\nworkspace = "../ws"\nincremental = true\n'
    (root / "jobs" / "survey.toml").write_text(task)
    (root / "config.toml").write_text('[runner]\noutput_dir = "runs"\nbackend = "offline"\n')
    night(run_cli, root)
    with (ws / "lib" / "core.py").open("a") as f:
        f.write("\n\ndef more():\n    return 3\n")
    for i in range(40):  # enough changes that the reads take the lists back page by page
        (ws / "lib" / f"new_{i:02d}.py").write_text(f"def new_{i}():\n    return {i}\n")
    second, doc = night(run_cli, root)
    assert doc["status"] == "succeeded" and doc["incremental"]["files_dependent"] == 300
    saved = (second / "tool-results" / "baseline-changes.txt").read_text()
    pairs_at = saved.index("\ndependents (300):\n") + 1
    recalls = calls(second, "recall")
    starts = [c.get("offset", 0) for c in recalls if c["path"].endswith("baseline-changes.txt")]
    assert starts and max(starts) < pairs_at, (starts, pairs_at)
    assert sorted(c["file_path"] for c in calls(second, "read")) == sorted(
        ["lib/core.py", *(f"lib/new_{i:02d}.py" for i in range(40))]
    )


def test_a_resumed_incremental_night_ends_with_the_report_of_an_uninterrupted_one(
    run_cli: Any, tmp_path: Path
) -> None:
    """The stand-in decides every step from the messages: an incremental night cut back to half its
    transcript (as a kill leaves it: its memory, events and outputs ahead of it) and resumed ends with the
    report the uninterrupted night wrote. (That a killed incremental night resumes from its baseline and
    record holds with any model: ``tests/test_incremental.py``.)"""
    ws = project(tmp_path, BIG, "context_char_limit = 20000\n")  # a small window: more turns to cut in
    first, _ = night(run_cli, tmp_path)
    change(ws)
    job, doc = night(run_cli, tmp_path)
    report = (job / "final.md").read_text()
    lines = (job / "transcript.jsonl").read_text().splitlines()
    assert len(lines) > 12, len(lines)
    (job / "transcript.jsonl").write_text("\n".join(lines[: len(lines) // 2]) + "\n")
    metrics = json.loads((job / "metrics.json").read_text())
    (job / "metrics.json").write_text(json.dumps({**metrics, "status": "cancelled"}))
    (job / "final.md").unlink()
    resumed = run_cli("resume", str(job.parent), cwd=tmp_path)
    assert resumed.returncode == 0, resumed.stderr
    after = json.loads((job / "metrics.json").read_text())
    assert after["status"] == "succeeded" and after["incremental"] == doc["incremental"]
    assert after["incremental"]["baseline"] == first.parent.name
    assert "Incremental survey:" in said(job)
    assert (job / "final.md").read_text() == report  # what the uninterrupted night wrote


# --- a survey split among subagents (the task tool) --------------------------------------------------


def split_project(root: Path) -> Path:
    """The big project with the task tool: its survey is split among subagents, one part a directory."""
    ws = project(root, BIG)
    task = root / "jobs" / "survey.toml"
    outputs = '"agents/**/memories/survey/facts-*.md", "baseline-agents/**/memories/survey/facts-*.md"'
    text = task.read_text().replace(
        '"memories/survey/facts-*.md"', f'"memories/survey/facts-*.md", {outputs}'
    )
    task.write_text('tools = ["read", "glob", "grep", "task"]\n' + text)
    return ws


def split_facts(report: str) -> str:
    """A split survey's totals, tables and TODO count: its report less the subagents it names."""
    totals = re.search(r"^\d+ files: .*$", report, re.M)
    tables = report.split("## Files and lines per extension", 1)[1].split("## Every file", 1)[0]
    return (totals[0] if totals else "") + tables


def texts(job: Path) -> str:
    """Everything the job's turns said besides their calls."""
    return "\n".join(
        str(b.get("text", ""))
        for line in (job / "transcript.jsonl").read_text().splitlines()
        if (m := json.loads(line))["role"] == "assistant" and isinstance(m["content"], list)
        for b in m["content"]
        if b.get("type") == "text"
    )


def test_a_split_survey_carries_over_the_parts_whose_files_did_not_change(
    run_cli: Any, tmp_path: Path
) -> None:
    ws = split_project(tmp_path)
    first, first_doc = night(run_cli, tmp_path)
    parts = sorted(p.name for p in (first / "agents").iterdir())
    assert len(parts) >= 4, parts  # the tree is split
    with (ws / "email" / "charset.py").open("a") as f:
        f.write("# TODO: one line more tonight\n")
    second, doc = night(run_cli, tmp_path)
    # the fresh runs go elsewhere: each night's baseline is the night before
    fresh, fresh_doc = night(run_cli, tmp_path, "--fresh", "--output-dir", "fresh")

    assert doc["incremental"]["files_changed"] == 1
    assert doc["cost_usd"] < 0.3 * first_doc["cost_usd"]  # one part surveyed again, not all of them
    assert abs(fresh_doc["cost_usd"] - first_doc["cost_usd"]) < 0.1 * first_doc["cost_usd"]
    assert [p.name for p in (second / "agents").iterdir()] == ["1-email"]  # the only part with a change
    report, fresh_report = (second / "final.md").read_text(), (fresh / "final.md").read_text()
    rows = survey_rows(report, second)
    assert rows and rows == survey_rows(fresh_report, fresh)  # every file's row, as a fresh survey has it
    assert rows["email/charset.py"][2] == len((ws / "email" / "charset.py").read_text().splitlines())
    assert split_facts(report) == split_facts(fresh_report)  # totals, tables and TODO count
    carried = [p for p in parts if "email" not in p]
    assert all(f"| `baseline-agents/{p}/final.md` |" in report for p in carried), report
    assert "`agents/1-email/final.md`" in report and "Every part is covered" in report
    assert f"1 of the baseline's {len(parts)} parts has changes" in texts(second)
    [email] = [p for p in parts if "email" in p]
    assert not (second / "baseline-agents" / email).exists()  # superseded by agents/1-email: removed
    shown = run_cli("diff", str(first.parent), str(second.parent), "--json", cwd=tmp_path)
    diffed = json.loads(shown.stdout)["jobs"][0]
    moved = diffed["added"] + diffed["removed"]  # the subagents table names the carried parts' copies
    assert moved and all(row.startswith(("`agents/", "`baseline-agents/")) for row in moved), moved
    files = [r for r in diffed["changed_units"] if "/" in r and not r.startswith("`")]
    assert files == ["email/charset.py"], diffed["changed_units"]  # the one file changed, no other

    # night three starts from night two: its carried parts and its new one are carried over in turn
    with (ws / "json" / "decoder.py").open("a") as f:
        f.write("# XXX: and one on the third night\n")
    third, third_doc = night(run_cli, tmp_path)
    fresh, fresh_doc = night(run_cli, tmp_path, "--fresh", "--output-dir", "fresh")
    assert third_doc["incremental"]["baseline"] == second.parent.name
    assert third_doc["cost_usd"] < 0.3 * fresh_doc["cost_usd"]
    [again] = [p.name for p in (third / "agents").iterdir()]
    assert "json" in again or "xml" in again  # the part that holds json/
    report, fresh_report = (third / "final.md").read_text(), (fresh / "final.md").read_text()
    assert survey_rows(report, third) == survey_rows(fresh_report, fresh)
    assert split_facts(report) == split_facts(fresh_report)
    assert "| `baseline-agents/1-email/final.md` |" in report and "Every part is covered" in report


def test_a_change_outside_every_part_means_a_full_split_survey(run_cli: Any, tmp_path: Path) -> None:
    ws = split_project(tmp_path)
    first, _ = night(run_cli, tmp_path)
    (ws / "newpkg").mkdir()
    (ws / "newpkg" / "mod.py").write_text('"""New tonight."""\n# FIXME: new\n')
    second, doc = night(run_cli, tmp_path)
    fresh, _ = night(run_cli, tmp_path, "--fresh")
    assert doc["incremental"]["files_added"] == 1
    assert 'A full split survey: a change is in no part of the baseline\'s split ("newpkg/mod.py")' in texts(
        second
    )
    assert "baseline-agents/" not in (second / "final.md").read_text()  # every part surveyed again
    report, fresh_report = (second / "final.md").read_text(), (fresh / "final.md").read_text()
    assert survey_rows(report, second) == survey_rows(fresh_report, fresh)
    assert split_facts(report) == split_facts(fresh_report)


def test_the_lists_of_a_split_baseline_are_read_page_by_page(
    run_cli: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from runner.offline import incremental_parts

    monkeypatch.setattr(incremental_parts, "PAGE_CHARS", 700)  # a prompt a line; the changes in pages
    ws = split_project(tmp_path)
    night(run_cli, tmp_path)
    for path in sorted((ws / "email").rglob("*.py")):
        with path.open("a") as f:
            f.write("# one line more\n")
    second, doc = night(run_cli, tmp_path)
    fresh, _ = night(run_cli, tmp_path, "--fresh", "--output-dir", "fresh")
    assert doc["incremental"]["files_changed"] > 25
    recalls = [c for c in calls(second, "recall") if c["path"] == "tool-results/baseline-changes.txt"]
    assert len(recalls) > 1 and len({c["offset"] for c in recalls}) == len(recalls)  # page after page
    assert [p.name for p in (second / "agents").iterdir()] == ["1-email"]
    report, fresh_report = (second / "final.md").read_text(), (fresh / "final.md").read_text()
    assert survey_rows(report, second) == survey_rows(fresh_report, fresh)
    assert split_facts(report) == split_facts(fresh_report)
