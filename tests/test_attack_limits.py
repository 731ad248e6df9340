"""Subagents multiplied every per-job limit but cost (issue 40, part 3): a parent with ``max_turns = 5``
and ``max_job_bytes = 1,000,000`` made 20 ``task`` calls a reply for 3 turns (60 subagents, 244 model
calls, 31.5 MB on disk) and ended ``succeeded``; each sandboxed call had limits of its own, so one
job with four subagents held four calls' memory at once.

Now the limits are the job's: subagents in all (``max_subagents_total``), turns (``max_turns``, its
subagents' calls included), bytes (``max_job_bytes``, their files and memory folders included),
sandboxes at once (``max_sandboxes``) in one memory and process budget; and ``runner validate`` says
when a batch's budgets do not fit the host. Each job here is driven by a small scripted model.
"""

from __future__ import annotations

import json
import os
import re
import time
from pathlib import Path
from typing import Any

import anyio
import pytest
from scripted import ScriptedModel, play_instead_of_the_stand_in

from runner.agent.runjob import Services
from runner.agent.session import Session
from runner.compaction.compactor import Compactor
from runner.compaction.summarizer import Summarizer
from runner.config import Limits
from runner.jobs import JobSpec
from runner.messages import text_of, tool_results
from runner.models.base import Reply, Request
from runner.pricing import Usage
from runner.rundir.store import JobStore, read_jsonl
from runner.rundir.trees import tree_bytes
from runner.tools import job_budget
from runner.tools.job_budget import JobBudget, Parent, cgroup_parents, host_problems, placed
from runner.tools.sandbox import CALL_MEMORY_BYTES, MAX_PROCESSES, bwrap_problem, run_command

PARENT = "Hand out the work."
GIB = 1024**3


class Flood:
    """The parent makes ``per_reply`` task calls a reply for ``replies`` replies, then answers; a
    subagent makes ``child_turns`` calls of ``child_call(turn)`` (a tool call) and then reports."""

    name = "flood"
    server_compaction = False

    def __init__(self, per_reply: int, replies: int, child_turns: int = 0, child_call: Any = None):
        self.per_reply, self.replies = per_reply, replies
        self.child_turns, self.child_call = child_turns, child_call
        self.requests: list[Request] = []
        self.child_results: list[str] = []

    async def create(self, request: Request) -> Reply:
        self.requests.append(request)
        await anyio.sleep(0.01)
        usage = Usage(input_tokens=100, output_tokens=10)
        messages = request.messages
        turn = sum(1 for m in messages if m["role"] == "assistant")
        if text_of(messages[0]) == PARENT:
            if turn < self.replies and request.tool_choice is None:
                calls = [
                    {
                        "type": "tool_use",
                        "id": f"toolu_t{turn}_{i}",
                        "name": "task",
                        "input": {"prompt": f"Part {turn}.{i}.", "description": f"part {turn} {i}"},
                    }
                    for i in range(self.per_reply)
                ]
                return Reply(calls, "tool_use", usage)
            return Reply([{"type": "text", "text": "Done."}], "end_turn", usage)
        if turn and tool_results(messages[-1]):
            self.child_results.append(str(tool_results(messages[-1])[0].get("content")))
        if turn < self.child_turns and request.tool_choice is None:
            call = {"type": "tool_use", "id": f"toolu_c{id(request)}", **self.child_call(turn)}
            return Reply([call], "tool_use", usage)
        return Reply([{"type": "text", "text": f"Report on {text_of(messages[0])}"}], "end_turn", usage)

    async def aclose(self) -> None:
        return None


def spec(tmp_path: Path, tools: tuple[str, ...] = ("read", "task"), **limits: Any) -> JobSpec:
    ws = tmp_path / "ws"
    ws.mkdir(exist_ok=True)
    (ws / "a.py").write_text('"""A."""\nx = 1\n')
    return JobSpec(
        name="parent",
        source=tmp_path / "parent.toml",
        prompt=PARENT,
        workspace=ws,
        model="claude-sonnet-5-5",
        system=None,
        tools=tools,
        limits=Limits(**limits),
    )


async def run(job: JobSpec, model: Flood, out: Path) -> Session:
    store = JobStore(out)
    await store.open()
    session = Session(
        job,
        services=Services(
            model=model, compactor=Compactor(Summarizer(None, "none")), summary_model="claude-haiku-4-5"
        ),
        store=store,
    )
    await session.run()
    return session


def all_results(job_dir: Path) -> list[dict[str, Any]]:
    transcript, _ = read_jsonl(job_dir / "transcript.jsonl")
    return [r for m in transcript if m["role"] == "user" for r in tool_results(m)]


def agents(job_dir: Path) -> list[str]:
    root = job_dir / "agents"
    return sorted(p.name for p in root.iterdir()) if root.is_dir() else []


@pytest.mark.anyio
async def test_sixty_task_calls_start_eight_subagents_against_max_subagents_total_8(tmp_path: Path) -> None:
    model = Flood(per_reply=20, replies=3)
    session = await run(spec(tmp_path, max_subagents_total=8), model, tmp_path / "parent")
    assert session.record.status == "succeeded", session.record.error
    assert len(agents(tmp_path / "parent")) == 8
    results = all_results(tmp_path / "parent")
    assert len(results) == 60
    refused = [r for r in results if "max_subagents_total = 8" in str(r["content"])]
    assert len(refused) == 52 and all(r.get("is_error") for r in refused)
    assert all(not r.get("is_error") for r in results[:8])  # the first eight are the subagents' reports
    assert len(session.record.subagents) == 8
    assert len(model.requests) == 4 + 8  # the parent's four calls and one each of eight subagents


@pytest.mark.anyio
async def test_the_issues_attack_stays_within_the_jobs_max_turns(tmp_path: Path) -> None:
    """max_turns = 5, 20 task calls a reply for 3 replies, each subagent reading for 3 turns: every
    model call of the job (the parent's and its subagents') is one of its 5 turns."""
    model = Flood(per_reply=20, replies=3, child_turns=3, child_call=lambda t: read_call())
    job = spec(tmp_path, max_turns=5, max_job_bytes=1_000_000)
    session = await run(job, model, tmp_path / "parent")
    record = session.record
    assert record.status == "max_turns", (record.status, record.error)
    assert len(model.requests) <= 5, len(model.requests)
    assert record.turns + sum(r["turns"] for r in record.subagents) == len(model.requests)
    assert (tmp_path / "parent" / "final.md").exists()
    results = all_results(tmp_path / "parent")
    assert sum("no turn left" in str(r["content"]) for r in results) >= 10
    assert len(agents(tmp_path / "parent")) <= 4
    assert tree_bytes(tmp_path / "parent") < 1_000_000


@pytest.mark.anyio
async def test_subagents_turns_count_against_the_parents_max_turns(tmp_path: Path) -> None:
    # 4 subagents of 6 calls each would make 24; the job has 12 turns, its last kept for its report
    model = Flood(per_reply=4, replies=1, child_turns=5, child_call=lambda t: read_call())
    session = await run(spec(tmp_path, max_turns=12), model, tmp_path / "parent")
    record = session.record
    child_turns = sum(r["turns"] for r in record.subagents)
    assert record.turns + child_turns == len(model.requests) == 12
    assert record.status == "max_turns" and "of its subagents" in (record.error or ""), record.error
    # the last request is the parent's report, made after every subagent ended
    assert text_of(model.requests[-1].messages[0]) == PARENT
    assert any(r["status"] == "max_turns" for r in record.subagents)


def read_call() -> dict[str, Any]:
    return {"name": "read", "input": {"file_path": "a.py"}}


@pytest.mark.anyio
async def test_subagents_files_and_memory_count_against_the_parents_max_job_bytes(tmp_path: Path) -> None:
    """Each subagent writes a 150 kB memory file a turn (the call's input is in its transcript too):
    8 of them for 5 turns would take 12 MB; the job has 1,000,000 bytes and ends disk_quota."""

    def remember(turn: int) -> dict[str, Any]:
        text = f"note {turn}\n" + "x" * 150_000
        return {
            "name": "memory",
            "input": {"command": "create", "path": f"/memories/n{turn}.md", "file_text": text},
        }

    model = Flood(per_reply=8, replies=2, child_turns=5, child_call=remember)
    session = await run(spec(tmp_path, max_job_bytes=1_000_000), model, tmp_path / "parent")
    record = session.record
    assert record.status == "disk_quota", (record.status, record.error)
    on_disk = tree_bytes(tmp_path / "parent")
    # past the quota only what is exempt (each ending's metrics.json and final.md, cut to the quota
    # and a notice) and the memory writes of the subagents running when it was reached
    assert on_disk < 1_000_000 + 4 * 150_200 + 300_000, on_disk
    results = all_results(tmp_path / "parent")
    assert any("max_job_bytes" in str(r["content"]) for r in results) or any(
        r["status"] == "disk_quota" for r in record.subagents
    )
    assert len(model.requests) < 2 + 8 * 6


def bwrap_ok() -> bool:
    return bwrap_problem() is None


@pytest.mark.anyio
@pytest.mark.skipif(not bwrap_ok(), reason="bwrap cannot run here")
async def test_one_jobs_subagents_run_at_most_max_sandboxes_bash_calls_at_once(tmp_path: Path) -> None:
    command = 's=$(date +%s.%N); sleep 0.6; echo "span $s $(date +%s.%N)"'
    model = Flood(
        per_reply=4,
        replies=1,
        child_turns=1,
        child_call=lambda t: {"name": "bash", "input": {"command": command}},
    )
    job = spec(tmp_path, tools=("bash", "read", "task"), max_subagents=4, max_sandboxes=2)
    session = await run(job, model, tmp_path / "parent")
    assert session.record.status == "succeeded", session.record.error
    spans = [
        tuple(map(float, m.groups()))
        for m in (re.search(r"span (\S+) (\S+)", r) for r in model.child_results)
        if m
    ]
    assert len(spans) == 4, model.child_results
    most = max(sum(1 for s, e in spans if s <= t < e) for t, _ in spans)
    assert most == 2, spans


@pytest.mark.anyio
@pytest.mark.skipif(not bwrap_ok(), reason="bwrap cannot run here")
async def test_a_jobs_calls_share_one_cgroup_under_the_runners_own(tmp_path: Path) -> None:
    parents = cgroup_parents()
    if not parents:
        pytest.skip("no cgroup to make here (not delegated to the runner)")
    ws = tmp_path / "ws"
    ws.mkdir()
    budget = JobBudget(2, CALL_MEMORY_BYTES, MAX_PROCESSES)
    seen: list[tuple[str, str, str]] = []

    async def call() -> None:
        with budget.entered():
            done = await run_command(
                "sleep 0.8; echo done",
                workspace=str(ws),
                writable=False,
                network=False,
                sandbox="bwrap",
                timeout_s=30,
            )
        assert done.exit_code == 0 and "done" in done.output, done

    async with anyio.create_task_group() as tg:
        for _ in range(3):
            tg.start_soon(call)
        await anyio.sleep(0.5)
        for parent in parents:
            for name in os.listdir(parent.path):
                if name.startswith(job_budget.CGROUP_PREFIX + f"{os.getpid()}-"):
                    where = os.path.join(parent.path, name)
                    limit = (
                        "memory.max"
                        if parent.kind == "v2"
                        else ("memory.limit_in_bytes" if parent.kind == "memory" else "pids.max")
                    )
                    with (
                        open(os.path.join(where, "cgroup.procs")) as f,
                        open(os.path.join(where, limit)) as g,
                    ):
                        seen.append((parent.kind, f.read(), g.read().strip()))
    assert budget.most == 2  # the third call waited for a slot
    kinds = {k for k, _, _ in seen}
    assert kinds == {p.kind for p in parents}, seen  # one job cgroup per hierarchy, not one a call
    assert len(seen) == len(parents), seen
    for kind, procs, limit in seen:
        assert len(procs.split()) >= 2, procs  # both running calls' processes are in it
        assert int(limit) == (2 * MAX_PROCESSES if kind == "pids" else 2 * CALL_MEMORY_BYTES)
    for parent in parents:  # gone once the job's calls ended
        assert not [
            n for n in os.listdir(parent.path) if n.startswith(f"{job_budget.CGROUP_PREFIX}{os.getpid()}-")
        ]


def fake_v2(root: Path, own: str, *, container: bool, delegated: bool = False) -> Path:
    """A cgroup v2 tree: the root hands out memory and pids, the runner's cgroup is ``own``."""
    (root / "cgroup.controllers").parent.mkdir(parents=True, exist_ok=True)
    (root / "cgroup.controllers").write_text("cpu memory pids\n")
    (root / "cgroup.subtree_control").write_text("memory pids\n")
    (root / "cgroup.procs").write_text("")
    if container:
        (root / "memory.max").write_text("max\n")
    here = root / own.strip("/")
    here.mkdir(parents=True, exist_ok=True)
    (here / "cgroup.procs").write_text("")
    (here / "cgroup.subtree_control").write_text("")
    proc = root.parent / "proc-cgroup"
    proc.write_text(f"0::{own}\n")
    return proc


def test_v2_job_cgroups_go_under_the_runners_own_never_the_machines_top(tmp_path: Path) -> None:
    # a container's own hierarchy, the runner in a leaf of it: under the container's root
    proc = fake_v2(tmp_path / "c" / "cg", "/runner", container=True)
    assert cgroup_parents(str(tmp_path / "c" / "cg"), str(proc)) == (
        Parent(str(tmp_path / "c" / "cg"), "v2"),
    )
    # a host: the runner in a service's cgroup that hands out nothing: nowhere (the top is not the runner's)
    proc = fake_v2(tmp_path / "h" / "cg", "/system.slice/runner.service", container=False)
    assert cgroup_parents(str(tmp_path / "h" / "cg"), str(proc)) == ()
    # the service hands out memory and pids to the runner's own subtree (delegated): there
    service = tmp_path / "h" / "cg" / "system.slice" / "runner.service"
    (service / "cgroup.subtree_control").write_text("memory pids\n")
    (service / "main").mkdir()
    (service / "main" / "cgroup.procs").write_text("")
    proc.write_text("0::/system.slice/runner.service/main\n")
    try:
        os.setxattr(service, "user.delegate", b"1")
    except OSError:
        pytest.skip("no user xattrs on this file system")
    assert cgroup_parents(str(tmp_path / "h" / "cg"), str(proc)) == (Parent(str(service), "v2"),)


def test_v1_job_cgroups_go_in_the_runners_memory_and_pids_cgroups(tmp_path: Path) -> None:
    root = tmp_path / "cg"
    for kind, path in (("memory", "svc/runner"), ("pids", "svc")):
        (root / kind / path).mkdir(parents=True)
        (root / kind / path / "cgroup.procs").write_text("")
    proc = tmp_path / "proc-cgroup"
    proc.write_text("5:memory:/svc/runner\n3:pids:/svc\n1:cpu,cpuacct:/\n")
    assert cgroup_parents(str(root), str(proc)) == (
        Parent(str(root / "memory" / "svc" / "runner"), "memory"),
        Parent(str(root / "pids" / "svc"), "pids"),
    )


@pytest.mark.anyio
async def test_a_call_is_placed_in_its_jobs_cgroup_before_it_execs(tmp_path: Path) -> None:
    """On a fake cgroup file system (plain directories): the job's cgroup made with its limits, and
    the call's pid written into its cgroup.procs by the call's own first process."""
    parent = tmp_path / "memory"
    parent.mkdir()
    budget = JobBudget(2, 1000, 10, parents=(Parent(str(parent), "memory"),))
    async with budget.slot() as procs:
        (made,) = [p for p in parent.iterdir()]
        assert (made / "memory.limit_in_bytes").read_text() == "2000"
        argv = placed(["/bin/sh", "-c", "echo $$"], procs)
        process = await anyio.run_process(argv)
        assert (made / "cgroup.procs").read_text().strip() == process.stdout.decode().strip()
        for leftover in made.iterdir():  # a real cgroup's files go with it; these are plain files
            leftover.unlink()
    assert not list(parent.iterdir())


def test_host_fit_names_concurrency_memory_ram_and_pid_max() -> None:
    job = (Limits(max_sandboxes=2), ("bash", "read", "task"))
    fits = host_problems(2, [job, job], call_memory=4 * GIB, call_processes=256, ram=24 * GIB, pids=32768)
    assert fits == []
    # the issue's host: 24 GiB, pid_max 32,768; concurrency 32 of jobs with four sandboxes each
    job = (Limits(max_sandboxes=4), ("bash", "read", "task"))
    lines = host_problems(32, [job] * 40, call_memory=4 * GIB, call_processes=256, ram=24 * GIB, pids=32768)
    assert len(lines) == 2, lines
    memory, pids = lines
    assert "concurrency 32" in memory and "16 GiB a job" in memory and "512 GiB" in memory
    assert "24.0 GiB of RAM" in memory and "lower [runner] concurrency to 1" in memory
    assert "32,768 processes" in pids and "pid_max 32,768" in pids and "concurrency to 28" in pids
    # jobs without bash take no sandbox; without task, one at a time
    assert (
        host_problems(32, [(Limits(), ("read",))] * 40, call_memory=4 * GIB, call_processes=256, ram=GIB)
        == []
    )
    one = host_problems(8, [(Limits(), ("bash",))] * 8, call_memory=4 * GIB, call_processes=256, ram=24 * GIB)
    assert one and "up to 1 sandboxes each" in one[0] and "32 GiB" in one[0]


def test_validate_warns_when_concurrency_times_the_jobs_budget_does_not_fit_the_host(
    tmp_path: Path, run_cli: Any
) -> None:
    (tmp_path / "ws").mkdir()
    (tmp_path / "jobs").mkdir()
    for i in range(3):
        (tmp_path / "jobs" / f"j{i}.toml").write_text(
            f'prompt = "go {i}"\nworkspace = "../ws"\ntools = ["read", "bash", "task"]\n'
        )
    ram = job_budget.host_ram()
    assert ram
    per_job = 2 * CALL_MEMORY_BYTES
    concurrency = 3
    (tmp_path / "config.toml").write_text(f"[runner]\nconcurrency = {concurrency}\n")
    proc = run_cli("validate", cwd=tmp_path)
    warned = [line for line in proc.stderr.splitlines() if "of sandbox memory" in line]
    if 3 * per_job > 0.9 * ram:
        assert warned and f"concurrency {concurrency}" in warned[0] and "os.sysconf" in warned[0], proc.stderr
    else:
        assert not warned, proc.stderr
    # one job at a time with one sandbox: 4 GiB, which fits any host with more than 4.5 GiB of RAM
    (tmp_path / "config.toml").write_text("[runner]\nconcurrency = 1\n[limits]\nmax_sandboxes = 1\n")
    proc = run_cli("validate", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "of sandbox memory" not in proc.stderr or ram < 4.5 * GIB


def test_run_warns_too(tmp_path: Path, run_cli: Any, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(job_budget, "host_ram", lambda: 4 * GIB)
    (tmp_path / "ws").mkdir()
    (tmp_path / "ws" / "a.py").write_text("x = 1\n")
    (tmp_path / "jobs").mkdir()
    (tmp_path / "jobs" / "j.toml").write_text(
        'prompt = "go"\nworkspace = "../ws"\ntools = ["read", "bash"]\n'
    )
    (tmp_path / "config.toml").write_text('[runner]\nbackend = "offline"\noutput_dir = "out"\n')
    model = ScriptedModel([("read", {"file_path": "a.py"})], "Read a.py.")
    play_instead_of_the_stand_in(monkeypatch, model)
    started = time.monotonic()
    proc = run_cli("run", "--json", cwd=tmp_path)
    assert time.monotonic() - started < 120
    assert "4.0 GiB of RAM" in proc.stderr and "concurrency 8" in proc.stderr, proc.stderr
    # a warning, not a refusal: the job ran, its two calls the script's
    assert proc.returncode == 0, proc.stderr
    [job] = json.loads(proc.stdout)["jobs"]
    assert (job["status"], job["turns"]) == ("succeeded", 2) and len(model.requests) == 2
    assert (Path(json.loads(proc.stdout)["run_dir"]) / "j" / "final.md").read_text().strip() == "Read a.py."


class Staggered(Flood):
    """The parent hands out three parts at once (alpha, charlie, bravo); alpha reads slowly (its calls
    take ``slow_s``) until it is stopped, charlie and bravo report at once."""

    def __init__(self, slow_s: float):
        super().__init__(per_reply=0, replies=0)
        self.slow_s = slow_s

    async def create(self, request: Request) -> Reply:
        self.requests.append(request)
        usage = Usage(input_tokens=100, output_tokens=10)
        first = text_of(request.messages[0])
        turn = sum(1 for m in request.messages if m["role"] == "assistant")
        if first == PARENT:
            if turn == 0 and request.tool_choice is None:
                parts = [
                    {
                        "type": "tool_use",
                        "id": f"toolu_{p}",
                        "name": "task",
                        "input": {"prompt": f"Part {p}.", "description": p},
                    }
                    for p in ("alpha", "charlie", "bravo")
                ]
                return Reply(parts, "tool_use", usage)
            return Reply([{"type": "text", "text": "Done."}], "end_turn", usage)
        if first == "Part alpha.":
            await anyio.sleep(self.slow_s)
            if request.tool_choice is None:
                return Reply([{"type": "tool_use", "id": f"toolu_a{turn}", **read_call()}], "tool_use", usage)
        return Reply([{"type": "text", "text": f"Report on {first}"}], "end_turn", usage)


@pytest.mark.anyio
async def test_a_subagent_counts_the_turns_left_when_it_starts_not_before_reading_its_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A real race: bravo waits for a slot while charlie reports, then reading its directory takes a
    while; meanwhile alpha's report (its last call, granted by its job) is in flight with alpha's ending
    already recorded. Counting alpha by its turns as made missed that report, and a turn counted
    before bravo's wait went stale: either way bravo was let make a call, 6 calls for max_turns = 5."""
    from runner.agent import subagents

    read_metrics = subagents.read_metrics

    def slow_for_bravo(child_dir: Path) -> Any:
        if child_dir.name.endswith("bravo"):
            time.sleep(0.6)
        return read_metrics(child_dir)

    monkeypatch.setattr(subagents, "read_metrics", slow_for_bravo)
    model = Staggered(slow_s=0.3)
    session = await run(spec(tmp_path, max_turns=5, max_subagents=2), model, tmp_path / "parent")
    record = session.record
    assert len(model.requests) <= 5, [text_of(r.messages[0]) for r in model.requests]
    assert record.turns + sum(r["turns"] for r in record.subagents) == len(model.requests)
    assert any(text_of(r.messages[0]) == "Part alpha." for r in model.requests[1:])
