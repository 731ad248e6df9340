"""Issue 36, items 5 and 6: the viewer's retries and compactions are ``metrics.json``'s; every number
of a job's usage is computed once (``JobMetrics.total_usage``: its own calls', its summaries' and its
subagents'), and the table, the totals line, ``report --json``, the viewer and ``metrics.json`` all
show that one sum, the job's own calls beside it; cache tokens in the totals.

Real ``runner run``s (in this process) on the anthropic backend against the emulator (429s and 529s;
prompt caching and a survey that delegates to subagents), then ``runner report``, ``report --json``
and ``runner view`` of them."""

from __future__ import annotations

import json
import re
import shutil
import sysconfig
from pathlib import Path

import pytest
from conftest import CliRunner

from runner.emulator.config import EmulatorConfig, Fault, Faults
from runner.emulator.server import running_emulator
from runner.offline import delegation
from runner.pricing import USAGE_KEYS

pytestmark = pytest.mark.stand_in


def test_the_viewer_counts_retries_and_compactions_as_metrics_json_does(
    tmp_path: Path, run_cli: CliRunner
) -> None:
    ws = tmp_path / "ws"
    ws.mkdir()
    for i in range(8):
        (ws / f"m{i}.py").write_text(f'"""Module {i}."""\n\n' + "def f():\n    return 1\n" * (i + 20))
    (tmp_path / "j.toml").write_text(
        'workspace = "ws"\nprompt = "Survey this workspace."\n'
        "[limits]\ncontext_char_limit = 3000\nkeep_recent_results = 1\nmax_retries = 8\n"
    )
    faults = Faults(rate_limit=Fault(schedule=[2, 5, 9]), overloaded=Fault(schedule=[3, 7]))
    # retry-after-ms too: the SDK waits the 10 ms, not retry-after's whole second, before each 429's retry
    with running_emulator(EmulatorConfig(faults=faults, retry_after_s=0.01, retry_after_ms=True)) as emu:
        env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": emu.base_url}
        done = run_cli("run", "j.toml", "--backend", "anthropic", "--output-dir", "runs", cwd=tmp_path, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = next(p for p in (tmp_path / "runs").iterdir() if not p.is_symlink())
    metrics = json.loads((run_dir / "j" / "metrics.json").read_text())
    events = [json.loads(line) for line in (run_dir / "j" / "events.jsonl").read_text().splitlines()]
    assert metrics["rate_limited_429"] == 3 and metrics["overloaded_529"] == 2 and metrics["retries"] == 5
    assert any(e["stage"] == "retries" for e in events)  # lines that are no compaction
    compactions = sum(metrics["compactions"].values())
    assert compactions > 0

    assert run_cli("view", str(run_dir), cwd=tmp_path).returncode == 0
    index = (run_dir / "index.html").read_text()
    assert '<td class="num" data-v="5" title="retries 5, 429 3, 529 2">5</td>' in index
    page = next((run_dir / "view").glob("j*.html")).read_text()
    assert f"<h2>Compactions ({compactions})</h2>" in page
    assert f"retries {metrics['retries']}<" in page


def test_the_table_totals_json_viewer_and_metrics_show_one_usage_with_subagents_and_cache(
    tmp_path: Path, run_cli: CliRunner, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(delegation, "DELEGATE_ENTRIES", 40)  # the copied packages make a bigger tree
    monkeypatch.setattr(delegation, "PART_ENTRIES", 1)
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    for name in ("email", "json", "asyncio"):
        shutil.copytree(stdlib / name, tmp_path / "ws" / name, ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "j.toml").write_text(
        'workspace = "ws"\nprompt = "Survey this workspace."\ntools = ["read", "glob", "grep", "task"]\n'
    )
    with running_emulator(EmulatorConfig(min_cacheable_tokens=256)) as emu:
        env = {"ANTHROPIC_API_KEY": "test-key", "ANTHROPIC_BASE_URL": emu.base_url, "COLUMNS": "250"}
        done = run_cli("run", "j.toml", "--backend", "anthropic", "--output-dir", "runs", cwd=tmp_path, **env)
    assert done.returncode == 0, done.stdout + done.stderr
    run_dir = next(p for p in (tmp_path / "runs").iterdir() if not p.is_symlink())
    metrics = json.loads((run_dir / "j" / "metrics.json").read_text())
    assert metrics["subagents"], "the survey was not delegated"

    # metrics.json: the job's whole usage, the sum of its parts, its own calls' beside it
    whole = metrics["total_usage"]
    parts = (metrics["usage"], metrics["summarizer_usage"], metrics["subagent_usage"])
    # (a count that is 0 may be left out: the 1-hour cache writes of a job with none)
    assert {k: whole.get(k, 0) for k in USAGE_KEYS} == {
        k: sum(p.get(k, 0) for p in parts) for k in USAGE_KEYS
    }
    assert whole["input_tokens"] > metrics["usage"]["input_tokens"]  # the subagents' are in it
    assert whole["cache_read_input_tokens"] > 0 and whole["cache_creation_input_tokens"] > 0

    # report --json: the same row, totals that add the rows' whole usage
    document = json.loads(run_cli("report", str(run_dir), "--json", cwd=tmp_path).stdout)
    [row] = document["jobs"]
    assert row["total_usage"] == whole and row["usage"] == metrics["usage"]
    assert {k: document["totals"].get(k, 0) for k in USAGE_KEYS} == {k: whole.get(k, 0) for k in USAGE_KEYS}

    # the table: the whole counts, the own calls' under them; the totals line with the cache tokens
    table = run_cli("report", str(run_dir), cwd=tmp_path, COLUMNS="250").stdout
    line = next(t for t in table.splitlines() if t.startswith("│ j "))
    assert f"{whole['input_tokens']:,}" in line and f"{whole['output_tokens']:,}" in line, table
    assert f"{whole['cache_read_input_tokens']:,}/{whole['cache_creation_input_tokens']:,}" in line, table
    assert f"own {metrics['usage']['input_tokens']:,}" in table, table
    read, written = whole["cache_read_input_tokens"], whole["cache_creation_input_tokens"]
    assert (
        f"{whole['input_tokens']:,} in / {whole['output_tokens']:,} out tokens "
        f"(cache {read:,} read / {written:,} written)"
    ) in table, table

    # the viewer: the index row and the job page show the same whole, the page the own calls' too
    assert run_cli("view", str(run_dir), cwd=tmp_path).returncode == 0
    index = (run_dir / "index.html").read_text()
    shown = re.findall(r'<td class="num" data-v="(\d+)">', index)[:4]
    assert [int(v) for v in shown] == [
        whole["input_tokens"],
        whole["output_tokens"],
        whole["cache_read_input_tokens"],
        whole["cache_creation_input_tokens"],
    ]
    page = next((run_dir / "view").glob("j*.html")).read_text()
    assert f"tokens in {whole['input_tokens']:,}," in page
    assert f"its own calls: in {metrics['usage']['input_tokens']:,}," in page
