"""The offline model delegates: a big tree's survey handed to subagents (``task``), in parts of about
the same size (a directory, several small ones, a big one's subdirectories and its own files, the
files at the top), each a scoped survey, their reports assembled by the parent.

The pure tests drive :func:`runner.offline.policy.decide` for a parent and answer its ``task`` calls
by running each child's conversation through the policy too, the real tools playing every other call
on a copy of real stdlib packages; what the reports say is checked against the files themselves. These
are the stand-in's own (marked ``stand_in``). What holds with any model (a ``task`` call through
``runner run`` is a subagent with its session and files, its report its result) is checked on a
scripted model (``tests/scripted.py``) whose subagents are scripted too."""

from __future__ import annotations

import json
import re
import shutil
import sysconfig
from pathlib import Path
from typing import Any

import anyio
import pytest
from conftest import CliRunner, expected_row, regular_files, survey_rows, todo_lines
from scripted import ScriptedModel, play_instead_of_the_stand_in, subagent_results

from runner.agent.subagents import slug
from runner.config import Limits
from runner.messages import Message, text_of, tool_results, tool_uses
from runner.offline import delegation, policy
from runner.offline.memory_survey import (
    TOP,
    TOTALS_LINE,
    files_only,
    scope_of,
    scoped_prompt,
    units,
)
from runner.protocol import SUBAGENT_CUT, SUBAGENT_RESULT, subagent_result, summary_text
from runner.rundir.store import JobStore
from runner.tools import file_tools
from runner.tools.toolset import Toolset

pytestmark = pytest.mark.anyio

PACKAGES = ("email", "json", "asyncio")
THRESHOLD = 40  # entries: the copied packages make a tree bigger than this (the default is for bigger trees)
TOOLS = ("read", "glob", "grep")


@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """email, json and asyncio (no caches), and files at the top: a TODO in one, a binary one."""
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    ws = tmp_path / "ws"
    for name in PACKAGES:
        shutil.copytree(stdlib / name, ws / name, ignore=shutil.ignore_patterns("__pycache__"))
    (ws / "README.md").write_text("# Packages\n\nTODO: say more.\n")
    (ws / "setup.py").write_text('"""Setup."""\n\ndef main():\n    pass  # FIXME\n')
    (ws / "logo.bin").write_bytes(bytes(range(256)) * 4)
    return ws


@pytest.fixture
def small_threshold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(delegation, "DELEGATE_ENTRIES", THRESHOLD)
    monkeypatch.setattr(delegation, "PART_ENTRIES", 1)  # as many parts as there are units, up to 8


class Play:
    """Conversations through the policy, the real tools answering; ``task`` calls answered by a child
    conversation whose files go to ``agents/<n>-<slug>/`` of the parent's directory."""

    def __init__(self, ws: Path, *, result_chars: int = 5_000, fail: tuple[str, ...] = ()):
        self.ws = ws
        self.result_chars = result_chars  # the most of a report a task result shows
        self.fail = fail  # descriptions of the tasks whose subagent runs out of turns
        self.count = 0
        self.transcripts: dict[str, list[Message]] = {}

    async def converse(
        self, prompt: str, job_dir: Path, tools: tuple[str, ...], *, task: bool, max_turns: int = 400
    ) -> tuple[list[Message], str, str]:
        store = JobStore(job_dir)
        await store.open()
        messages: list[Message] = [{"role": "user", "content": prompt}]
        async with Toolset(str(self.ws), tools, store, limits=Limits()) as toolset:
            names = toolset.names | ({"task"} if task else set())
            for turn in range(max_turns):
                content, stop = policy.decide(messages, names)
                messages.append({"role": "assistant", "content": content})
                if stop == "end_turn":
                    final = text_of(messages[-1])
                    (job_dir / "final.md").write_text(final, encoding="utf-8")
                    return messages, final, "succeeded"
                calls = tool_uses(messages[-1])
                results: dict[str, dict[str, Any]] = {}
                others = [c for c in calls if c["name"] != "task"]
                for call, result in zip(others, await toolset.run_batch(others, turn=turn), strict=True):
                    results[call["id"]] = result
                async with anyio.create_task_group() as tg:
                    for call in (c for c in calls if c["name"] == "task"):
                        self.count += 1
                        tg.start_soon(self.task, call, job_dir, self.count, results)
                messages.append({"role": "user", "content": [results[c["id"]] for c in calls]})
        (job_dir / "final.md").write_text("(out of turns)\n", encoding="utf-8")
        return messages, "(out of turns)\n", "max_turns"

    async def task(
        self, call: dict[str, Any], parent: Path, n: int, results: dict[str, dict[str, Any]]
    ) -> None:
        args = call["input"]
        where = f"agents/{n}-{slug(args['description'])}"
        tools = tuple(args["tools"])
        assert set(tools) <= set(TOOLS)
        if args["description"] in self.fail:
            messages, final, status = await self.converse(
                args["prompt"], parent / where, tools, task=False, max_turns=3
            )
        else:
            messages, final, status = await self.converse(args["prompt"], parent / where, tools, task=False)
        self.transcripts[args["description"]] = messages
        shown = final[: self.result_chars]
        head = SUBAGENT_RESULT.format(
            dir=where,
            status=status,
            turns=len(messages) // 2,
            cost=0.0,
            path=f"{where}/final.md",
            chars=len(final),
            cut=SUBAGENT_CUT if len(shown) < len(final) else "",
        )
        results[call["id"]] = {
            "type": "tool_result",
            "tool_use_id": call["id"],
            "content": head + shown,
            **({"is_error": True} if status != "succeeded" else {}),
        }


def task_calls(messages: list[Message]) -> list[list[dict[str, Any]]]:
    """The task calls of each assistant message that made some."""
    return [calls for m in messages if (calls := [u for u in tool_uses(m) if u["name"] == "task"])]


def assert_rows_right(rows: dict[str, list[Any]], truth: dict[str, bytes]) -> None:
    assert set(rows) == set(truth), (sorted(set(truth) - set(rows))[:5], sorted(set(rows) - set(truth))[:5])
    wrong = [
        (p, rows[p])
        for p, data in truth.items()
        if ("binary" if rows[p][1] == "image" else rows[p][1], rows[p][2]) != expected_row(data)
    ]
    assert not wrong, wrong[:5]


def in_scope(path: str, scope: str) -> bool:
    """Whether a workspace-relative path is in one of the scope's units."""
    for unit in units(scope):
        only = files_only(unit)
        if (only is None and path.startswith(unit + "/")) or (
            only is not None and Path(path).parent == Path(only)
        ):
            return True
    return False


def scope_of_call(call: dict[str, Any]) -> str:
    return scope_of([{"role": "user", "content": call["input"]["prompt"]}]) or ""


# the parts of the test tree: asyncio (no subdirectory) whole, email (more than 3/16 of the
# tree) cut into its own files and email/mime, json, the files at the top
PARTS = ["asyncio", "email/.", "email/mime", "json", TOP]


def totals(report: str) -> tuple[int, ...]:
    match = TOTALS_LINE.search(report)
    assert match, report[:500]
    return tuple(int(g) for g in match.groups())


# --- the pure policy --------------------------------------------------------------------------------


@pytest.mark.stand_in
async def test_a_big_tree_is_split_among_subagents_and_every_file_is_right(tree, tmp_path, small_threshold):
    play = Play(tree)
    job = tmp_path / "job"
    messages, final, status = await play.converse("Survey this workspace.", job, TOOLS, task=True)
    assert status == "succeeded"
    [calls] = task_calls(messages)  # every part in one reply
    assert sorted(map(scope_of_call, calls)) == sorted(PARTS)
    assert all("Survey this workspace." in c["input"]["prompt"] for c in calls)
    assert all(c["input"]["tools"] == list(TOOLS) for c in calls)
    truth = regular_files(tree)
    assert_rows_right(survey_rows(final, job), truth)
    files, text, lines, _, binary, _, errors = totals(final)
    assert files == len(truth) and binary == 1 and errors == 0 and text == len(truth) - 1
    assert lines == sum(expected_row(d)[1] for d in truth.values() if expected_row(d)[0] == "text")
    todo = re.search(r"## TODO / FIXME / XXX \((\d+) lines in (\d+) files", final)
    assert todo and int(todo[1]) == todo_lines(truth)
    assert "Every part is covered" in final and "Not covered" not in final
    for n, call in enumerate(calls, 1):
        where = f"agents/{n}-{slug(call['input']['description'])}"
        assert f"`{where}/final.md`" in final and (job / where / "memories" / "survey").is_dir()
    for call in calls:  # each part read only its own files
        transcript = play.transcripts[call["input"]["description"]]
        read = [
            str(u["input"].get("file_path")) for m in transcript for u in tool_uses(m) if u["name"] == "read"
        ]
        assert read and all(in_scope(p, scope_of_call(call)) for p in read), (call["input"], read[:5])


@pytest.mark.stand_in
async def test_the_parts_tables_give_as_many_largest_files_as_the_request_asks(
    tree, tmp_path, small_threshold
):
    play = Play(tree)
    job = tmp_path / "job"
    messages, final, status = await play.converse(
        "Survey it; list the 25 largest files.", job, TOOLS, task=True
    )
    assert status == "succeeded" and task_calls(messages)
    chars = {p: len(d.decode()) for p, d in regular_files(tree).items() if expected_row(d)[0] == "text"}
    want = sorted(chars.items(), key=lambda kv: (-kv[1], kv[0]))[:25]
    section = final.split("## Largest text files", 1)[1].split("\n## ", 1)[0]
    rows = [
        (path, int(size)) for path, _, size in re.findall(r"^\| (.+?) \| (\d+) \| (\d+) \|$", section, re.M)
    ]
    assert rows == want


@pytest.mark.stand_in
async def test_a_cut_report_is_read_back_before_the_parent_reports(tree, tmp_path, small_threshold):
    play = Play(tree, result_chars=400)  # not even the extension table is shown
    job = tmp_path / "job"
    messages, final, status = await play.converse("Survey this workspace.", job, TOOLS, task=True)
    assert status == "succeeded"
    recalls = [u["input"] for m in messages for u in tool_uses(m) if u["name"] == "recall"]
    [calls] = task_calls(messages)
    assert sorted(r["path"] for r in recalls) == sorted(
        f"agents/{n}-{slug(c['input']['description'])}/final.md" for n, c in enumerate(calls, 1)
    )
    truth = regular_files(tree)
    todo = re.search(r"## TODO / FIXME / XXX \((\d+) lines in (\d+) files", final)
    assert todo and int(todo[1]) == todo_lines(truth) and "see its report" not in final
    assert totals(final)[0] == len(truth)
    assert_rows_right(survey_rows(final, job), truth)


@pytest.mark.stand_in
async def test_a_failed_subagent_leaves_its_part_not_covered(tree, tmp_path, small_threshold):
    play = Play(tree, fail=("asyncio",))
    job = tmp_path / "job"
    _, final, status = await play.converse("Survey this workspace.", job, TOOLS, task=True)
    assert status == "succeeded"
    assert f"**Not covered**: 1 of the {len(PARTS)} parts (`asyncio/`)" in final and "## Not covered" in final
    assert re.search(r"^\| `agents/\d-asyncio` \| `asyncio/` \| max_turns \|", final, re.M)
    truth = {p: d for p, d in regular_files(tree).items() if not p.startswith("asyncio/")}
    assert totals(final)[0] == len(truth)  # the failed part's counts are not in the totals
    assert_rows_right(survey_rows(final, job), truth)  # nor are its rows


@pytest.mark.stand_in
async def test_a_small_tree_is_surveyed_as_without_the_task_tool(tree, tmp_path):
    for name in ("asyncio", "email"):
        shutil.rmtree(tree / name)
    with_task = await Play(tree).converse("Survey this workspace.", tmp_path / "a", TOOLS, task=True)
    without = await Play(tree).converse("Survey this workspace.", tmp_path / "b", TOOLS, task=False)
    assert not task_calls(with_task[0])
    assert with_task[1] == without[1]  # the same report: the survey never saw the extra call
    assert delegation.without_probe(with_task[0])[1:] == without[0][1:]
    assert_rows_right(survey_rows(with_task[1], tmp_path / "a"), regular_files(tree))


@pytest.mark.stand_in
async def test_a_tree_with_one_top_level_directory_is_not_split(tree, tmp_path, small_threshold):
    for name in ("asyncio", "json"):
        shutil.rmtree(tree / name)
    messages, final, _ = await Play(tree).converse("Survey this workspace.", tmp_path / "a", TOOLS, task=True)
    assert not task_calls(messages)
    assert_rows_right(survey_rows(final, tmp_path / "a"), regular_files(tree))


@pytest.mark.parametrize("scope", ["email", TOP, "email/.", "email/mime|json", "json|.|email/."])
@pytest.mark.stand_in
async def test_a_scoped_survey_reads_only_its_part_with_workspace_paths(tree, tmp_path, scope):
    prompt = scoped_prompt(scope, "Survey this workspace.")
    messages, final, status = await Play(tree).converse(prompt, tmp_path / "job", TOOLS, task=True)
    assert status == "succeeded" and not task_calls(messages)  # a part is never split again
    truth = {p: d for p, d in regular_files(tree).items() if in_scope(p, scope)}
    assert truth and all(in_scope(p, scope) for p in survey_rows(final, tmp_path / "job"))
    assert_rows_right(survey_rows(final, tmp_path / "job"), truth)
    todo = re.search(r"## TODO / FIXME / XXX \((\d+) lines in (\d+) files", final)
    assert todo and int(todo[1]) == todo_lines(truth)
    dirs = {u if files_only(u) is None else (files_only(u) or ".") for u in units(scope)}
    for m in messages:  # every call stays in the part: its directories, or the root's own name
        for use in tool_uses(m):
            args = use["input"]
            if use["name"] in ("glob", "grep"):
                where = str(args.get("path", "."))
                probe = use["name"] == "glob" and "path" not in args and args["pattern"] in dirs | {"*"}
                inside = in_scope(where, scope) or any(where == d or where.startswith(d + "/") for d in dirs)
                assert probe or inside, (scope, args)
            elif use["name"] == "read":
                assert in_scope(args["file_path"], scope), (scope, args)


@pytest.mark.stand_in
def test_the_scope_is_read_from_the_prompt_and_a_plain_survey_has_none():
    for scope in ("email", "a b/c", TOP, "a b/c/.", "email/.|email/mime|json", "json|.|x/y/."):
        assert scope_of([{"role": "user", "content": scoped_prompt(scope, "Survey it.")}]) == scope
    assert scope_of([{"role": "user", "content": "Survey it."}]) is None
    assert not delegation.applies(
        [{"role": "user", "content": scoped_prompt("x", "Survey it.")}], {"task", "memory", "glob", "read"}
    )
    assert not delegation.applies([{"role": "user", "content": "Survey it."}], {"memory", "glob", "read"})
    assert delegation.applies([{"role": "user", "content": "Survey it."}], {"task", "memory", "glob", "read"})


@pytest.mark.stand_in
async def test_small_parts_are_grouped_and_every_file_is_right(tree, tmp_path, small_threshold, monkeypatch):
    monkeypatch.setattr(delegation, "PARTS", 2)  # the units dealt out to two parts
    monkeypatch.setattr(delegation, "LANES", 2)
    play = Play(tree)
    messages, final, status = await play.converse(
        "Survey this workspace.", tmp_path / "job", TOOLS, task=True
    )
    assert status == "succeeded"
    [calls] = task_calls(messages)
    scopes = [scope_of_call(c) for c in calls]
    assert len(scopes) == 2 and sorted(u for s in scopes for u in units(s)) == sorted(PARTS)
    for call in calls:
        transcript = play.transcripts[call["input"]["description"]]
        read = [
            str(u["input"].get("file_path")) for m in transcript for u in tool_uses(m) if u["name"] == "read"
        ]
        assert read and all(in_scope(p, scope_of_call(call)) for p in read), (call["input"], read[:5])
    truth = regular_files(tree)
    assert_rows_right(survey_rows(final, tmp_path / "job"), truth)
    assert totals(final)[0] == len(truth)
    todo = re.search(r"## TODO / FIXME / XXX \((\d+) lines in (\d+) files", final)
    assert todo and int(todo[1]) == todo_lines(truth)


@pytest.mark.stand_in
def test_the_parts_are_about_the_same_size_largest_first():
    # 160 entries: "big" (100) is over 3/16 of it: cut into its subdirectories and its own files (its
    # whole listing says their sizes); the twelve small directories are dealt out with the rest
    listing = [f"big/own{k}.py" for k in range(10)]
    listing += ["big/a"] + [f"big/a/f{k}" for k in range(59)] + ["big/b"] + [f"big/b/f{k}" for k in range(29)]
    pieces = delegation.pieces_of("big", listing)
    assert sorted(pieces or []) == [(10, "big/."), (30, "big/b"), (60, "big/a")]
    sizes = {"big": len(listing)} | {f"s{k}": 5 for k in range(12)}
    parts = delegation.plan_parts(
        entries=160, sizes=sizes, pieces={"big": [list(p) for p in pieces or []]}, top=0
    )
    assert len(parts) == delegation.LANES  # a small tree: one part a lane
    found = [u for p in parts for u in units(p)]
    assert sorted(found) == sorted(["big/a", "big/b", "big/."] + [f"s{k}" for k in range(12)])
    weight = {"big/a": 60, "big/b": 30, "big/.": 10} | {f"s{k}": 5 for k in range(12)}
    loads = [sum(weight[u] for u in units(p)) for p in parts]
    assert loads == sorted(loads, reverse=True) and loads[0] == 60  # the biggest unit alone, first
    assert max(loads[1:]) - min(loads[1:]) <= 5  # the rest within the smallest unit of each other


@pytest.mark.stand_in
def test_a_bigger_tree_is_cut_into_more_parts_up_to_two_a_lane():
    sizes = {f"d{k:02d}": 1_000 for k in range(40)}
    for entries, want in ((856, 4), (5_600, 5), (20_000, 8), (400_000, 8)):
        scaled = {d: entries // 40 for d in sizes}
        parts = delegation.plan_parts(entries=entries, sizes=scaled, pieces={}, top=0)
        assert len(parts) == want, (entries, len(parts))
        assert sorted(u for p in parts for u in units(p)) == sorted(sizes)


@pytest.mark.stand_in
def test_a_task_result_header_parses():
    head = SUBAGENT_RESULT.format(
        dir="agents/1-email",
        status="succeeded",
        turns=3,
        cost=0.0,
        path="agents/1-email/final.md",
        chars=10,
        cut=SUBAGENT_CUT,
    )
    assert subagent_result(head + "body") == ("agents/1-email", "succeeded", "agents/1-email/final.md", True)


# --- through the runtime ----------------------------------------------------------------------------


def run_task_job(tmp_path: Path, run_cli: CliRunner) -> tuple[Path, dict]:
    """``runner run`` on the offline backend of one job over ``tmp_path/ws`` offered the task tool: its
    directory and its metrics (the run exited 0)."""
    (tmp_path / "j.toml").write_text(
        'workspace = "ws"\nprompt = "Survey this workspace."\ntools = ["read", "glob", "grep", "task"]\n'
    )
    done = run_cli("run", "j.toml", "--backend", "offline", "--output-dir", "runs", cwd=tmp_path)
    assert done.returncode == 0, done.stdout + done.stderr
    job = next((tmp_path / "runs").glob("*/j"))
    return job, json.loads((job / "metrics.json").read_text())


@pytest.mark.stand_in
def test_runner_run_of_a_survey_with_the_task_tool_delegates_on_the_offline_model(
    tree, tmp_path, small_threshold, run_cli: CliRunner
):
    job, metrics = run_task_job(tmp_path, run_cli)
    assert metrics["status"] == "succeeded"
    final = (job / "final.md").read_text()
    assert f"Every part is covered: all {len(PARTS)} subagents succeeded." in final
    agents = sorted(p.name for p in (job / "agents").iterdir())
    assert len(agents) == len(PARTS) and all((job / "agents" / a / "final.md").is_file() for a in agents)
    assert all((job / "agents" / a / "memories" / "survey").is_dir() for a in agents)
    assert all(f"`agents/{a}/final.md`" in final for a in agents)
    truth = regular_files(tree)
    assert_rows_right(survey_rows(final, job), truth)
    assert totals(final)[0] == len(truth)
    todo = re.search(r"## TODO / FIXME / XXX \((\d+) lines in (\d+) files", final)
    assert todo and int(todo[1]) == todo_lines(truth)


PARTS_BY_PROMPT = {  # a subagent's prompt: its description, the file it reads, its report
    "Read the top files: setup.py.": ("top files", "setup.py", "# Top\n\nsetup.py: read.\n"),
    "Read the json part: json/__init__.py.": ("json part", "json/__init__.py", "# json\n\nRead.\n"),
}


def results_report(request: Any) -> str:
    """The parent's report: each subagent's result head as its call came back (directory, status)."""
    return "# Parts\n\n" + "".join(f"- {h[0]}: {h[1]}\n" for h in subagent_results(request))


def test_runner_run_with_the_task_tool_gives_each_subagent_its_session_and_files(
    tmp_path, run_cli: CliRunner, monkeypatch: pytest.MonkeyPatch
):
    """A job with the task tool, on a scripted model whose one turn hands out two tasks: each is a
    subagent (its session, its files under ``agents/<n>-<slug>/``, the parent's other tools and no
    task), its report its result; the parent reports from the results."""
    subagents = {
        prompt: ScriptedModel([("read", {"file_path": path})], final=report)
        for prompt, (_, path, report) in PARTS_BY_PROMPT.items()
    }
    tasks = [
        ("task", {"description": what, "prompt": prompt, "tools": ["read", "grep"]})
        for prompt, (what, _, _) in PARTS_BY_PROMPT.items()
    ]
    model = ScriptedModel([tasks], final=results_report, subagents=subagents)
    play_instead_of_the_stand_in(monkeypatch, model)
    tree = tmp_path / "ws"
    (tree / "json").mkdir(parents=True)
    (tree / "setup.py").write_text('"""Setup."""\n')
    (tree / "json" / "__init__.py").write_text('"""JSON."""\n')
    job, metrics = run_task_job(tmp_path, run_cli)
    assert (metrics["status"], metrics["turns"]) == ("succeeded", 2)  # its own: the tasks, the report
    assert sorted(p.name for p in (job / "agents").iterdir()) == ["1-top-files", "2-json-part"]
    for n, (prompt, (what, path, report)) in enumerate(PARTS_BY_PROMPT.items(), 1):
        where = job / "agents" / f"{n}-{slug(what)}"
        spec = json.loads((where / "job.json").read_text())
        assert (spec["prompt"], spec["tools"]) == (prompt, ["read", "grep"])
        assert (where / "final.md").read_text() == report
        sub = json.loads((where / "metrics.json").read_text())
        assert (sub["status"], sub["turns"]) == ("succeeded", 2)
        transcript = [json.loads(line) for line in (where / "transcript.jsonl").read_text().splitlines()]
        assert [(u["name"], u["input"]) for m in transcript for u in tool_uses(m)] == [
            ("read", {"file_path": path})
        ]
        [result] = [r for m in transcript for r in tool_results(m)]
        first_line = (tree / path).read_text().split("\n")[0]
        assert not result.get("is_error") and first_line in str(result["content"])
    transcript = [json.loads(line) for line in (job / "transcript.jsonl").read_text().splitlines()]
    results = [str(r["content"]) for m in transcript for r in tool_results(m)]
    assert [r.split("\n", 1)[1] for r in results] == [report for _, _, report in PARTS_BY_PROMPT.values()]
    parent = {t["name"] for t in model.requests[0].tools}
    assert {"read", "glob", "grep", "task"} <= parent
    for child in subagents.values():  # a subagent's tools: those its task named, no task of its own
        assert [{t["name"] for t in r.tools} for r in child.requests] == [parent - {"glob", "task"}] * 2
    parts = "- agents/1-top-files: succeeded\n- agents/2-json-part: succeeded\n"
    assert (job / "final.md").read_text() == "# Parts\n\n" + parts


@pytest.mark.stand_in
async def test_a_big_directory_whose_listing_is_cut_is_measured_by_its_subdirectories(
    tree, tmp_path, small_threshold, monkeypatch
):
    monkeypatch.setattr(file_tools, "GLOB_RESULT_LIMIT", 20)  # every big directory's listing is cut
    play = Play(tree)
    messages, final, status = await play.converse(
        "Survey this workspace.", tmp_path / "job", TOOLS, task=True
    )
    assert status == "succeeded"
    sizes = [u["input"] for m in messages for u in tool_uses(m) if u["input"].get("path") == "email/mime"]
    # round 2: the subdirectory's size, and its own subdirectories (were it as big, it would be cut too)
    assert sizes == [{"pattern": "**/*", "path": "email/mime"}, {"pattern": "*/", "path": "email/mime"}]
    [calls] = task_calls(messages)
    assert sorted(map(scope_of_call, calls)) == sorted(PARTS)  # the same parts as a whole listing gives
    truth = regular_files(tree)
    assert_rows_right(survey_rows(final, tmp_path / "job"), truth)
    assert totals(final)[0] == len(truth)


@pytest.mark.stand_in
async def test_measuring_goes_on_after_a_summary_that_kept_only_its_note(tree, tmp_path, small_threshold):
    """A history summary that kept the measuring notes but not the survey's own: the parent measures on
    (the turn whose answers the summary took is asked again), never starts the survey over."""
    messages: list[Message] = [{"role": "user", "content": "Survey this workspace."}]
    names = {"read", "glob", "grep", "memory", "task"}
    store = JobStore(tmp_path / "job")
    await store.open()
    async with Toolset(str(tree), TOOLS, store, limits=Limits()) as toolset:
        for turn in range(2):  # the first turn, then the first measuring turn
            content, _ = policy.decide(messages, names)
            messages.append({"role": "assistant", "content": content})
            calls = tool_uses(messages[-1])
            results = await toolset.run_batch(calls, turn=turn)
            messages.append({"role": "user", "content": results})
    note = "\n".join(  # the measuring notes (the directories' and the sizes')
        line
        for m in messages
        for line in text_of(m).split("\n")
        if line.startswith((delegation.SIZES_KEY, delegation.DIRS_KEY))
    )
    asked = [u["input"] for u in tool_uses(messages[-2])]
    summary = summary_text("Context summary", "Survey this workspace.", note, where="transcript.jsonl")
    content, stop = policy.decide([{"role": "user", "content": summary}], names)
    assert stop == "tool_use" and delegation.SIZES_KEY in text_of({"role": "assistant", "content": content})
    again = [u["input"] for u in tool_uses({"role": "assistant", "content": content})]
    assert again == asked  # the same directories, measured again: their answers were in the summary


@pytest.mark.parametrize("shown", [200, 50])  # listings whole, or cut (their totals read back)
@pytest.mark.stand_in
async def test_a_wide_tree_is_counted_then_sized_and_its_big_directory_cut(
    tmp_path, small_threshold, monkeypatch, shown
):
    """Twelve top-level directories (more than a measuring turn sizes): their subdirectories are
    counted first, then the sizes are asked, most subdirectories first; the big one is cut."""
    monkeypatch.setattr(file_tools, "GLOB_RESULT_LIMIT", shown)
    ws = tmp_path / "ws"
    for sub, n in (("a", 60), ("b", 30)):
        (ws / "big" / sub).mkdir(parents=True)
        for k in range(n):
            (ws / "big" / sub / f"f{k}.txt").write_text(f"{sub} {k}\n")
    for k in range(10):
        (ws / "big" / f"own{k}.py").write_text(f"x = {k}  # TODO {k}\n")
    for d in range(11):
        (ws / f"small{d:02d}").mkdir()
        for k in range(3):
            (ws / f"small{d:02d}" / f"s{k}.md").write_text("small\n")
    play = Play(ws)
    messages, final, status = await play.converse(
        "Survey this workspace.", tmp_path / "job", TOOLS, task=True
    )
    assert status == "succeeded"
    [calls] = task_calls(messages)
    found = sorted(u for c in calls for u in units(scope_of_call(c)))
    assert found == sorted(["big/a", "big/b", "big/.", *(f"small{d:02d}" for d in range(11))])
    counted = [u["input"] for m in messages for u in tool_uses(m) if u["input"].get("pattern") == "*/"]
    assert {"pattern": "*/", "path": "small00"} in counted  # counted before sized
    truth = regular_files(ws)
    assert_rows_right(survey_rows(final, tmp_path / "job"), truth)
    assert totals(final)[0] == len(truth)
    todo = re.search(r"## TODO / FIXME / XXX \((\d+) lines in (\d+) files", final)
    assert todo and int(todo[1]) == todo_lines(truth) == 10


@pytest.mark.stand_in
def test_a_big_directory_not_all_measured_is_cut_by_estimates():
    note = {"root": "/r", "entries": 160, "dirs": ["big", "s"], "top": 0, "n": [100, 60]}
    found = delegation.Measured({**note, "subdirs": {"0": ["a", "b", "c"]}, "sub": {"big/a": 40}})
    found.cut_unmeasured()
    # the rest (100 - 40 - 3 entries of the subdirectories themselves) shared by b, c and the own files
    assert found.pieces["big"] == [[40, "big/a"], [19, "big/b"], [19, "big/c"], [19, "big/."]]
    parts = delegation.plan_parts(entries=160, sizes={"big": 100, "s": 60}, pieces=found.pieces, top=0)
    assert sorted(u for p in parts for u in units(p)) == ["big/.", "big/a", "big/b", "big/c", "s"]


@pytest.mark.stand_in
async def test_a_summary_that_dropped_the_directories_note_has_them_listed_again(
    tree, tmp_path, small_threshold
):
    messages: list[Message] = [{"role": "user", "content": "Survey this workspace."}]
    names = {"read", "glob", "grep", "memory", "task"}
    store = JobStore(tmp_path / "job")
    await store.open()
    async with Toolset(str(tree), TOOLS, store, limits=Limits()) as toolset:
        for turn in range(2):
            content, _ = policy.decide(messages, names)
            messages.append({"role": "assistant", "content": content})
            messages.append(
                {"role": "user", "content": await toolset.run_batch(tool_uses(messages[-1]), turn=turn)}
            )
        asked = [u["input"] for u in tool_uses(messages[-2])]
        sizes = next(
            line for line in text_of(messages[-2]).split("\n") if line.startswith(delegation.SIZES_KEY)
        )
        summary = summary_text("Context summary", "Survey this workspace.", sizes, where="transcript.jsonl")
        view: list[Message] = [{"role": "user", "content": summary}]
        content, _ = policy.decide(view, names)
        assert [u["input"] for u in tool_uses({"role": "assistant", "content": content})] == [
            delegation.REPROBE
        ]
        view.append({"role": "assistant", "content": content})
        view.append({"role": "user", "content": await toolset.run_batch(tool_uses(view[-1]), turn=2)})
        content, _ = policy.decide(view, names)
    text = text_of({"role": "assistant", "content": content})
    assert delegation.DIRS_KEY in text and delegation.SIZES_KEY in text  # noted again
    assert [u["input"] for u in tool_uses({"role": "assistant", "content": content})] == asked
