"""The ``ray`` executor: the same run directory as the local one, the summary gate held across
workers, a killed worker's jobs finished elsewhere from their last complete turn, and Ctrl-C.

One small local Ray instance shared by the Ray group's tests (``cluster``, tests/conftest.py: 2 CPUs, no
dashboard), started as the runner starts one (:func:`runner.execution.ray_driver.start_local_ray`: on
the loopback only, which a test checks, as one checks the instance ``runner run --executor ray``
starts). Skipped, saying why, only when Ray cannot start on this machine.
"""

from __future__ import annotations

import ipaddress
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import anyio
import pytest
from conftest import RAY_TESTS
from scripted import ScriptedModel, answer_with, files_under, reads, scripted_api

from runner.cli import main
from runner.compaction.compactor import Compactor
from runner.compaction.summarizer import Summarizer
from runner.config import Limits, load_settings
from runner.emulator.config import EmulatorConfig, Latency
from runner.emulator.server import running_emulator
from runner.execution.core import Batch
from runner.execution.scheduler import run_batch
from runner.jobs import JobSpec, find_task_files, load_jobs
from runner.messages import tool_uses
from runner.pricing import PriceTable
from runner.rundir.store import read_jsonl
from runner.services import RunBudget

pytestmark = RAY_TESTS

FINAL = {"succeeded", "failed", "timeout", "max_turns", "budget_exceeded", "cancelled"}


def settings_for(tmp_path: Path, text: str = ""):
    path = tmp_path / "config.toml"
    path.write_text(text)
    return load_settings(path)


def anthropic_batch(run_dir: Path, specs: list[JobSpec], settings) -> Batch:
    return Batch(
        run_dir=run_dir,
        specs=specs,
        model=ScriptedModel([], final="(unused: each Ray worker builds its own model)"),
        compactor=Compactor(Summarizer(None, "x")),
        summary_model=settings.summarizer.model,
        concurrency=settings.runner.concurrency,
        meta={"backend": "anthropic"},
        run_budget=RunBudget(None),
        prices=PriceTable(),
    )


def on_ray(batch: Batch, settings, **kwargs):
    from runner.execution.ray_driver import run_batch_ray

    return anyio.run(lambda: run_batch_ray(batch, settings, workers=2, **kwargs))


def on_ray_beside(
    side: Callable[[], None],
    run_dir: Path,
    specs: list[JobSpec],
    settings,
    latency: float,
    model: ScriptedModel,
):
    """An API batch on ray against the emulator (``latency`` s a call) answering with ``model``, with
    ``side`` running in a thread meanwhile (it kills a worker, or interrupts the driver)."""
    with running_emulator(EmulatorConfig(latency=Latency(seconds=latency))) as emu:
        answer_with(emu, model)
        os.environ["ANTHROPIC_BASE_URL"] = emu.base_url
        thread = threading.Thread(target=side)
        thread.start()
        try:
            return on_ray(anthropic_batch(run_dir, specs, settings), settings)
        finally:
            thread.join()
            os.environ.pop("ANTHROPIC_BASE_URL")


def layout(run_dir: Path) -> set[str]:
    return {str(p.relative_to(run_dir)) for p in run_dir.rglob("*") if p.is_file()}


def workspace(tmp_path: Path, files: int = 12, lines: int = 600) -> Path:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    for i in range(files):
        (ws / f"m{i:02d}.py").write_text(f'"""Module {i}."""\n' + "x = 1\n" * (lines + 40 * i))
    return ws


def spec(name: str, ws: Path, **limits) -> JobSpec:
    return JobSpec(
        name=name,
        source=Path(f"{name}.toml"),
        prompt=f"Survey this workspace ({name}).",
        workspace=ws,
        model="claude-sonnet-5-5",
        system="You survey code.",
        tools=("read", "glob", "grep"),
        limits=Limits(**{"max_retries": 8, "timeout_s": 120, **limits}),
    )


def report_of(name: str) -> str:
    return f"# Report of {name}\n\nEvery module was read."


def scripted_jobs(specs: list[JobSpec], ws: Path, notes: int = 0) -> ScriptedModel:
    """The model of an API batch on Ray (it answers at the emulator, in this process): each job (told by
    its prompt, as sent or quoted by a summary) reads every ``.py`` file of ``ws``, one a turn, in order,
    then writes :func:`report_of` itself; ``notes`` characters of notes in each reply. A request of no
    job is answered with no call, and a text no job's report is."""
    turns = reads(files_under(ws))
    return ScriptedModel(
        [],
        final="(a request of no job)",
        subagents={s.prompt: ScriptedModel(turns, final=report_of(s.name), notes=notes) for s in specs},
    )


SURVEY = "# Survey\n\nEvery module was read."


def api_batch(run_dir: Path, jobs_dir: Path, settings) -> Batch:
    """The jobs of ``jobs_dir`` as ``runner run`` batches them on the anthropic backend (its model and
    summarizer, ANTHROPIC_BASE_URL's API): here that of a local run; Ray's workers build their own."""
    from runner.execution.batch import make_backend

    files, _ = find_task_files([jobs_dir])
    specs, errors = load_jobs(files, settings)
    backend = make_backend(settings, "anthropic", specs=specs)
    return Batch(
        run_dir=run_dir,
        specs=specs,
        errors=errors,
        model=backend.model,
        compactor=Compactor(backend.summarizer),
        summary_model=settings.summarizer.model,
        concurrency=4,
        meta={"backend": "anthropic"},
        handle_signals=False,
        run_budget=RunBudget(None),
        prices=PriceTable(),
    )


def test_a_ray_batch_writes_the_local_layout_and_statuses(cluster, tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    ws = workspace(tmp_path, files=4, lines=5)
    for i in range(3):
        (jobs / f"ok{i}.toml").write_text(f'prompt = "Survey {i}."\nworkspace = "{ws}"\n')
    (jobs / "short.toml").write_text(f'prompt = "Survey."\nworkspace = "{ws}"\n[limits]\nmax_turns = 2\n')
    (jobs / "broken.toml").write_text("prompt = 3\n")
    settings = settings_for(tmp_path)
    # every job plays one script at the emulator: the 4 files read, one a turn, then SURVEY
    model = ScriptedModel(reads(files_under(ws)), final=SURVEY)
    with scripted_api(model) as api:
        os.environ["ANTHROPIC_BASE_URL"] = api.emulator.base_url
        try:
            local = anyio.run(run_batch, api_batch(tmp_path / "local", jobs, settings))
            ray_run = on_ray(api_batch(tmp_path / "ray", jobs, settings), settings)
        finally:
            os.environ.pop("ANTHROPIC_BASE_URL")

    statuses = {n: r.status for n, r in local.results.items()}
    assert statuses == {
        "ok0": "succeeded",
        "ok1": "succeeded",
        "ok2": "succeeded",
        "short": "max_turns",
        "broken": "failed",
    }
    assert {n: r.status for n, r in ray_run.results.items()} == statuses
    assert layout(tmp_path / "ray") == layout(tmp_path / "local")
    document = json.loads((tmp_path / "ray" / "run.json").read_text())
    assert document["state"] == "finished" and document["executor"] == "ray"
    assert {j["job"]: j["status"] for j in document["jobs"]} == statuses
    worker_pids = {w["pid"] for w in document["workers"]}
    assert len(worker_pids) == 2 and os.getpid() not in worker_pids
    for name in ("ok0", "ok1", "ok2", "short"):
        local_metrics = json.loads((tmp_path / "local" / name / "metrics.json").read_text())
        metrics = json.loads((tmp_path / "ray" / name / "metrics.json").read_text())
        assert metrics["worker"]["pid"] in worker_pids and local_metrics["worker"]["pid"] == os.getpid()
        # the script's turns, alike on both: 4 reads and the report, or the 2 max_turns allows
        assert metrics["turns"] == local_metrics["turns"] == (2 if name == "short" else 5), name
        for run in ("local", "ray"):
            transcript, _ = read_jsonl(tmp_path / run / name / "transcript.jsonl")
            if name != "short":
                assert (tmp_path / run / name / "final.md").read_text() == SURVEY, (run, name)
            assert transcript == read_jsonl(tmp_path / "local" / name / "transcript.jsonl")[0], (run, name)


def test_the_summary_gate_holds_across_workers(cluster, tmp_path):
    # each job reads the 5 files, one a turn, with 2500 characters of notes a reply: twice over the
    # context limit, so every job is summarized twice (the compactor's choices follow from the history
    # alone: measured once, the same every run), 12 summary requests in all
    ws = workspace(tmp_path, files=5)
    settings = settings_for(
        tmp_path, "[runner]\nconcurrency = 8\n[summarizer]\nmax_concurrent = 1\nrequests_per_minute = 2\n"
    )
    specs = [spec(f"job{i}", ws, context_char_limit=8_000, compact_target_ratio=0.5) for i in range(6)]
    window_s = 1.0
    with running_emulator(EmulatorConfig(latency=Latency(seconds=0.2))) as emu:
        model = answer_with(emu, scripted_jobs(specs, ws, notes=2_500))
        os.environ["ANTHROPIC_BASE_URL"] = emu.base_url
        try:
            result = on_ray(
                anthropic_batch(tmp_path / "run", specs, settings), settings, summary_window_s=window_s
            )
        finally:
            os.environ.pop("ANTHROPIC_BASE_URL")
        stats = emu.state.snapshot()
        spans = sorted(emu.state.summary_spans)
    assert all(r.status == "succeeded" for r in result.results.values()), {
        n: r.error for n, r in result.results.items()
    }
    pids = {
        json.loads((tmp_path / "run" / s.name / "metrics.json").read_text())["worker"]["pid"] for s in specs
    }
    assert len(pids) == 2  # both workers ran jobs
    for s in specs:  # the whole script once (5 reads, the report), summarized twice
        metrics = json.loads((tmp_path / "run" / s.name / "metrics.json").read_text())
        assert metrics["turns"] == 6, (s.name, metrics["turns"])
        assert sorted(p.name for p in (tmp_path / "run" / s.name / "summaries").iterdir()) == [
            "0001.md",
            "0002.md",
        ], s.name
        assert (tmp_path / "run" / s.name / "final.md").read_text() == report_of(s.name)
    assert stats["summary_requests"] == 12, stats["summary_requests"]
    assert len(model.requests) == 6 * 6 and stats["outcomes"] == {"ok": 6 * 6 + 12}, stats["outcomes"]
    assert stats["summary_peak_concurrent"] == 1  # max_concurrent = 1 for the whole cluster
    # requests_per_minute = 2 per 1 s window: any 3 summary requests arrive at least ~1 s apart
    gaps = [spans[i + 2][0] - spans[i][0] for i in range(len(spans) - 2)]
    assert min(gaps) > window_s - 0.15, gaps


def _transcripts(run_dir: Path) -> dict[str, list[dict]]:
    out = {}
    for path in run_dir.glob("*/transcript.jsonl"):
        out[path.parent.name] = read_jsonl(path)[0]
    return out


def test_a_killed_workers_jobs_finish_elsewhere_from_their_last_turn(cluster, tmp_path):
    ws = workspace(tmp_path, files=10, lines=5)
    settings = settings_for(tmp_path, "[runner]\nconcurrency = 8\n")
    specs = [spec(f"job{i}", ws) for i in range(6)]
    run_dir = tmp_path / "run"
    seen: dict = {}

    def kill_one_worker() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                document = json.loads((run_dir / "run.json").read_text())
            except (OSError, ValueError):
                document = {}
            transcripts = _transcripts(run_dir) if document.get("workers") else {}
            if sum(len(t) >= 4 for t in transcripts.values()) >= 4:
                seen["pid"] = document["workers"][0]["pid"]
                os.kill(seen["pid"], signal.SIGKILL)
                time.sleep(0.05)
                seen["transcripts"] = _transcripts(run_dir)
                return
            time.sleep(0.05)

    model = scripted_jobs(specs, ws)
    reads_each = len(files_under(ws))  # 10: a job's turns are its 10 reads and its report
    result = on_ray_beside(kill_one_worker, run_dir, specs, settings, latency=0.25, model=model)
    assert "pid" in seen, "the batch ended before a worker could be killed"
    assert {n: r.status for n, r in result.results.items()} == {s.name: "succeeded" for s in specs}
    document = json.loads((run_dir / "run.json").read_text())
    assert [w for w in document["workers"] if w.get("lost")] == [
        w for w in document["workers"] if w["pid"] == seen["pid"]
    ]
    moved = 0
    for s in specs:
        metrics = json.loads((run_dir / s.name / "metrics.json").read_text())
        assert metrics["status"] == "succeeded" and metrics["worker"]["pid"] != seen["pid"]
        # the whole script, once: no turn lost, none recorded twice, the report its own
        assert metrics["turns"] == reads_each + 1, (s.name, metrics["turns"])
        transcript, _ = read_jsonl(run_dir / s.name / "transcript.jsonl")
        assert len(transcript) == 2 * reads_each + 2, (s.name, len(transcript))
        assert (run_dir / s.name / "final.md").read_text() == report_of(s.name)
        lost = [
            e for e in read_jsonl(run_dir / s.name / "events.jsonl")[0] if e.get("stage") == "worker_lost"
        ]
        if not lost:
            continue
        moved += 1
        start = lost[0]["continue_from_message"]
        before = seen["transcripts"][s.name]
        after, _ = read_jsonl(run_dir / s.name / "transcript.jsonl")
        assert start >= 3 and after[:start] == before[:start]  # continued from its own history, not restarted
        assert len(before) - start <= 1  # at most the reply of an unfinished turn was dropped
        assert after[0]["content"] == s.prompt and len(after) > start
    assert moved >= 1


def test_ctrl_c_cancels_every_job_on_every_worker(cluster, tmp_path):
    ws = workspace(tmp_path, files=10, lines=5)
    settings = settings_for(tmp_path, "[runner]\nconcurrency = 8\n")
    specs = [spec(f"job{i}", ws) for i in range(6)]
    run_dir = tmp_path / "run"

    def interrupt() -> None:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            if sum(len(t) >= 2 for t in _transcripts(run_dir).values()) >= 4:
                os.kill(os.getpid(), signal.SIGINT)
                return
            time.sleep(0.05)

    model = scripted_jobs(specs, ws)  # 11 turns a job: the interrupt lands mid-run
    result = on_ray_beside(interrupt, run_dir, specs, settings, latency=0.5, model=model)
    assert result.interrupted
    document = json.loads((run_dir / "run.json").read_text())
    assert document["state"] == "interrupted"
    statuses = {j["job"]: j["status"] for j in document["jobs"]}
    assert set(statuses.values()) == {"cancelled"}, statuses
    pids = set()
    script = files_under(ws)
    for s in specs:
        metrics = json.loads((run_dir / s.name / "metrics.json").read_text())
        # written by its worker when cancelled: mid-script, before its 11th turn (its report)
        assert metrics["status"] == "cancelled" and 1 <= metrics["turns"] <= len(script), metrics["turns"]
        pids.add(metrics["worker"]["pid"])
        transcript, _ = read_jsonl(run_dir / s.name / "transcript.jsonl")
        assert transcript[0]["content"] == s.prompt
        read = [u["input"]["file_path"] for m in transcript for u in tool_uses(m)]
        assert read == script[: len(read)], read  # its own script's reads, in order, each once
    assert len(pids) == 2  # jobs on both workers were cancelled


def _listening(root: int) -> set[str]:
    """The addresses the TCP sockets of process ``root`` and of every process under it listen on (read
    from /proc: the sockets each has open, the kernel's table of listening ones)."""
    children: dict[int, list[int]] = {}
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            ppid = int(Path(f"/proc/{entry}/stat").read_text().rsplit(")", 1)[1].split()[1])
        except (OSError, ValueError, IndexError):
            continue
        children.setdefault(ppid, []).append(int(entry))
    pids, todo = set(), [root]
    while todo:
        pid = todo.pop()
        if pid not in pids:
            pids.add(pid)
            todo += children.get(pid, [])
    inodes = set()
    for pid in pids:
        try:
            links = [os.readlink(f"/proc/{pid}/fd/{fd}") for fd in os.listdir(f"/proc/{pid}/fd")]
        except OSError:
            continue
        inodes |= {link[8:-1] for link in links if link.startswith("socket:[")}
    found = set()
    for table, family in (("tcp", socket.AF_INET), ("tcp6", socket.AF_INET6)):
        for line in Path(f"/proc/net/{table}").read_text().splitlines()[1:]:
            local, state, inode = line.split()[1], line.split()[3], line.split()[9]
            if state == "0A" and inode in inodes:  # 0A: LISTEN
                raw = bytes.fromhex(local.split(":")[0])  # 32-bit words, each in host (little) order
                found.add(
                    socket.inet_ntop(family, b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4)))
                )
    return found


def _loopback(address: str) -> bool:
    ip = ipaddress.ip_address(address)
    return (ip.ipv4_mapped or ip).is_loopback if isinstance(ip, ipaddress.IPv6Address) else ip.is_loopback


def test_the_local_ray_reports_and_listens_on_the_loopback_only(cluster):
    assert [node["NodeManagerAddress"] for node in cluster.nodes()] == ["127.0.0.1"]
    assert cluster.get_runtime_context().gcs_address.startswith("127.0.0.1:")
    listening = _listening(os.getpid())  # this process (the driver) and the instance it started
    assert listening and all(_loopback(a) for a in listening), listening


@pytest.mark.slow  # a Ray of its own: about 15 s on a shared 2-core machine
def test_runner_run_starts_a_ray_that_listens_on_the_loopback_only(tmp_path):
    """``runner run --executor ray`` without ``ray_address``: every socket its Ray listens on, sampled
    while it runs, is on the loopback."""
    pytest.importorskip("ray")
    ws = workspace(tmp_path, files=2, lines=2)
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "a.toml").write_text(f'prompt = "Survey."\nworkspace = "{ws}"\n')
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("RAY_ADDRESS", None)
    env.pop("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", None)  # the runner's own default, not this process's
    with open(tmp_path / "stderr", "w+") as err:
        proc = subprocess.Popen(
            [sys.executable, "-m", "runner", "run", "jobs", "--backend", "offline", "--executor", "ray"],
            cwd=tmp_path,
            env=env,
            stdout=subprocess.DEVNULL,
            stderr=err,
        )
        seen: set[str] = set()
        started = time.monotonic()
        while proc.poll() is None and time.monotonic() - started < 240:
            seen |= _listening(proc.pid)
            time.sleep(0.1)
        if proc.poll() is None:
            proc.kill()
        err.seek(0)
        assert proc.wait() == 0, err.read()[-3000:]
    assert seen and all(_loopback(a) for a in seen), seen


@pytest.mark.slow  # a Ray of its own, started and shut down
def test_a_local_ray_that_comes_up_on_the_network_is_refused_with_one_error_line(tmp_path):
    pytest.importorskip("ray")
    ws = workspace(tmp_path, files=1, lines=1)
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "a.toml").write_text(f'prompt = "Survey."\nworkspace = "{ws}"\n')
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "1"}
    env.pop("RAY_ADDRESS", None)
    done = subprocess.run(
        [sys.executable, "-m", "runner", "run", "jobs", "--backend", "offline", "--executor", "ray"],
        cwd=tmp_path,
        env=env,
        capture_output=True,
        text=True,
        timeout=240,
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    if done.returncode == 0:  # Ray found no address but the loopback's: nothing to refuse
        pytest.skip("this machine has no network address for Ray to come up on")
    assert done.returncode == 2, done.stderr[-3000:]
    assert len(errors) == 1 and "reachable from the network" in errors[0], done.stderr[-3000:]
    assert not any((tmp_path / "runs").glob("*/a/metrics.json"))


def test_choosing_ray_without_it_installed_is_one_line_and_exit_2(tmp_path, monkeypatch, capsys):
    monkeypatch.setitem(sys.modules, "ray", None)  # as if not installed
    monkeypatch.chdir(tmp_path)
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "a.toml").write_text(f'prompt = "x"\nworkspace = "{tmp_path}"\n')
    assert main(["run", "--executor", "ray", "--backend", "offline"]) == 2
    lines = [line for line in capsys.readouterr().err.strip().splitlines() if not line.startswith("config: ")]
    assert len(lines) == 1 and "pip install" in lines[0] and "ray" in lines[0], lines
    assert not (tmp_path / "runs").exists()


def test_importing_the_runner_does_not_import_ray():
    code = (
        "import sys, runner.cli, runner.execution.scheduler, runner.agent.runjob, runner.execution; "
        "sys.exit('ray' in sys.modules)"
    )
    assert subprocess.run([sys.executable, "-c", code]).returncode == 0


def test_a_worker_that_cannot_see_the_run_directory_is_one_error_before_any_job(cluster, tmp_path):
    """The multi-machine case on one machine: the driver, in a mount namespace of its own, has a
    private filesystem over its output directory; the cluster's workers do not see it."""
    if (
        not shutil.which("unshare")
        or subprocess.run(["unshare", "-m", "true"], capture_output=True).returncode
    ):
        pytest.skip(
            "needs `unshare -m` (a private mount namespace) to give the driver storage the workers lack"
        )
    ws = workspace(tmp_path, files=2, lines=2)
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "a.toml").write_text(f'prompt = "Survey."\nworkspace = "{ws}"\n')
    private = tmp_path / "private"
    private.mkdir()
    address = cluster.get_runtime_context().gcs_address
    command = (
        f"mount -t tmpfs none {private} && {sys.executable} -m runner run jobs --backend offline "
        f"--executor ray --ray-address {address} --output-dir {private}/runs"
    )
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c", command], cwd=tmp_path, capture_output=True, text=True, timeout=120
    )
    errors = [line for line in done.stderr.splitlines() if line.startswith("error")]
    assert done.returncode == 2, done.stderr
    assert (
        len(errors) == 1
        and "cannot see the run directory" in errors[0]
        and "storage every node sees" in errors[0]
    )
    assert "Traceback" not in done.stderr
    assert not (private / "runs").exists()  # the workers' side: nothing was written


def test_the_run_budget_is_one_for_the_whole_cluster(cluster, tmp_path):
    jobs = tmp_path / "jobs"
    jobs.mkdir()
    ws = workspace(tmp_path, files=4, lines=5)
    for i in range(8):
        (jobs / f"j{i}.toml").write_text(f'prompt = "Survey {i}."\nworkspace = "{ws}"\n')
    settings = settings_for(tmp_path, "[runner]\nmax_cost_usd = 0.08\n")
    # every job plays one script at the emulator (billed from each request, no prompt cache): the 4
    # files read, one a turn, 300 characters of notes a reply, then SURVEY; so each job costs the same
    model = ScriptedModel(reads(files_under(ws)), final=SURVEY, notes=300)
    with scripted_api(model) as api:
        os.environ["ANTHROPIC_BASE_URL"] = api.emulator.base_url
        try:
            batch = api_batch(tmp_path / "run", jobs, settings)
            batch.run_budget = RunBudget(0.08)
            result = on_ray(batch, settings)
            # what one whole job costs, measured without Ray or a budget
            alone = anyio.run(run_batch, api_batch(tmp_path / "alone", jobs, settings))  # no run budget
        finally:
            os.environ.pop("ANTHROPIC_BASE_URL")
    document = json.loads((tmp_path / "run" / "run.json").read_text())
    statuses = [r.status for r in result.results.values()]
    assert "budget_exceeded" in statuses
    costs = {round(r.cost_usd, 6) for r in alone.results.values()}
    assert len(costs) == 1 and {r.status for r in alone.results.values()} == {"succeeded"}, alone.results
    one_job = costs.pop()
    # a budget per worker would let the two workers spend 2 x 0.08 = 0.16 (the 8 jobs want more:
    # 8 x one_job); one budget for the cluster stops the run past 0.08 by no more than the calls in
    # flight when it was crossed (a worker learns of the other's spending when it next charges):
    # measured 0.102 (one_job 0.0255; the stand-in's jobs: 0.091-0.107 on a quiet machine and 0.123 at
    # a load of 7 on 2 cores, more calls in flight when the other worker's charge lands), so three
    # quarters of the way to two limits tells them apart
    assert one_job < 0.08 and 8 * one_job > 0.16, one_job
    assert 0.08 <= document["totals"]["cost_usd"] < 0.14, document["totals"]
    assert sum(s == "succeeded" for s in statuses) * one_job < 0.14


def test_a_lost_workers_job_that_had_not_started_simply_starts(tmp_path):
    """A job queued on a worker that died before starting it has no directory: it starts over, and
    nothing is written for it (the driver must not fail writing a worker_lost line there)."""
    pytest.importorskip("ray", reason="Ray is not installed")
    from runner.execution.ray_driver import continue_point

    spec = JobSpec(
        name="queued",
        source=tmp_path / "queued.toml",
        workspace=tmp_path,
        prompt="Survey.",
        model="m",
        system=None,
        tools=("read",),
        limits=Limits(),
    )
    assert continue_point(tmp_path / "run" / "queued", spec, {"pid": 1}) is None
    assert not (tmp_path / "run").exists()
