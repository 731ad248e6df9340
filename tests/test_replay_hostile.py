"""``runner replay`` on hostile histories: what another agent left on disk is read without a hang, an
unbounded read, a write outside ``--dump``'s directory, or work growing with the square of its size.

- a job's ``job.json`` that is a FIFO, a link (to ``/dev/zero`` or a file) or over its cap is one error
  line (exit 2), never a wait or a read of everything;
- loading is linear: consecutive messages merge without copying the merged one or going over it
  again, and a repeated call id's new name is found without trying every name taken before (both
  counted, not timed), with the same history as ever at the largest sizes allowed;
- ``--dump`` writes inside its directory only, whatever the history's name (``...jsonl``) and whatever
  link, FIFO or hard link is planted there;
- a history of more than :data:`~runner.replay.history.MAX_MESSAGES` message lines is one error line,
  at the first line over (nothing after it parsed).
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
from pathlib import Path
from typing import Any

import pytest
from conftest import run_cli_process, runner_argv, runner_env

from runner.cli import main
from runner.replay import HistoryError, load_history
from runner.replay import history as history_module
from runner.replay.engine import dump_parts
from runner.replay.history import MAX_JOB_JSON_BYTES, MAX_MESSAGES, History

TRANSCRIPT = '{"role":"user","content":"go"}\n{"role":"assistant","content":"done"}\n'


def _job(tmp_path: Path, name: str = "job") -> Path:
    job = tmp_path / name
    job.mkdir()
    (job / "transcript.jsonl").write_text(TRANSCRIPT)
    return job


def _lines(path: Path, messages: list[dict[str, Any]], header: dict[str, Any] | None = None) -> Path:
    lines = ([json.dumps(header)] if header is not None else []) + [json.dumps(m) for m in messages]
    path.write_text("\n".join(lines) + "\n")
    return path


def _errors(stderr: str) -> list[str]:
    return [line for line in stderr.splitlines() if line.startswith("error:")]


# job.json


def test_a_fifo_job_json_is_one_error_line_not_a_hang(tmp_path):
    job = _job(tmp_path)
    os.mkfifo(job / "job.json")
    done = run_cli_process("replay", str(job), cwd=tmp_path, timeout=120)  # the timeout: a hang's guard
    assert done.returncode == 2
    assert _errors(done.stderr) == [f"error: {job / 'job.json'}: not a regular file"]


def _limit_memory() -> None:  # a child's address space: a read of /dev/zero ends at it
    resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))


def test_a_job_json_linked_to_dev_zero_is_one_error_line_not_a_read_of_everything(tmp_path):
    job = _job(tmp_path)
    (job / "job.json").symlink_to("/dev/zero")
    done = subprocess.run(
        runner_argv("replay", str(job)),
        cwd=tmp_path,
        env=runner_env(),
        capture_output=True,
        text=True,
        timeout=120,
        preexec_fn=_limit_memory,
    )
    assert done.returncode == 2, done.stderr[-500:]
    assert _errors(done.stderr) == [f"error: {job / 'job.json'}: a symbolic link (not followed)"]


def test_a_job_json_that_is_a_link_or_too_big_is_refused_and_a_plain_one_read(tmp_path, capsys):
    elsewhere = tmp_path / "elsewhere.json"
    elsewhere.write_text(json.dumps({"system": "not this job's"}))
    linked = _job(tmp_path, "linked")
    (linked / "job.json").symlink_to(elsewhere)
    big = _job(tmp_path, "big")
    (big / "job.json").write_text(json.dumps({"system": "s" * MAX_JOB_JSON_BYTES}))
    for job, expected in (
        (linked, "a symbolic link (not followed)"),
        (big, f"over {MAX_JOB_JSON_BYTES:,} bytes; a job.json is read whole"),
    ):
        with pytest.raises(HistoryError) as caught:
            load_history(job / "transcript.jsonl")
        assert str(caught.value) == f"{job / 'job.json'}: {expected}"
        assert main(["replay", str(job)]) == 2
        assert f"{job / 'job.json'}: {expected}" in capsys.readouterr().err
    plain = _job(tmp_path, "plain")
    (plain / "job.json").write_text(json.dumps({"system": "s" * (MAX_JOB_JSON_BYTES - 20)}))
    assert load_history(plain / "transcript.jsonl").system == "s" * (MAX_JOB_JSON_BYTES - 20)
    for content in ("not json", "[1]", '{"system": 3}'):  # as before: no system prompt
        (plain / "job.json").write_text(content)
        assert load_history(plain / "transcript.jsonl").system == ""
    (plain / "job.json").unlink()
    assert load_history(plain / "transcript.jsonl").system == ""


# linear loading


class CountingList(list):  # type: ignore[type-arg]
    """A list that counts the items iterated over."""

    visits = 0

    def __iter__(self):  # type: ignore[no-untyped-def]
        for item in super().__iter__():
            CountingList.visits += 1
            yield item


def test_merging_consecutive_messages_never_goes_over_the_merged_one_again(tmp_path, monkeypatch):
    """n consecutive user messages (text and answers to n parallel calls): the merged message's
    blocks are not copied or scanned again as each next one merges (counted: a few visits a block,
    where copying each time would be n*n/2), and it holds every block in order."""
    n = 3000
    calls = [{"type": "tool_use", "id": f"c{i}", "name": "bash", "input": {}} for i in range(n)]
    messages: list[dict[str, Any]] = [
        {"role": "user", "content": "go"},
        {"role": "assistant", "content": calls},
    ]
    for i in range(n):
        messages.append(
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": f"c{i}", "content": f"r{i}"},
                    {"type": "tool_result", "tool_use_id": f"c{i}", "content": "again"},  # no answer
                ],
            }
        )
        messages.append({"role": "user", "content": f"line {i}"})
    messages.append({"role": "assistant", "content": "done"})
    path = _lines(tmp_path / "merged.jsonl", messages, {"system": "s"})
    real_add = history_module._add

    def counted_add(history: History, number: int, record: dict[str, Any]) -> None:
        real_add(history, number, record)
        last = history.messages[-1]
        if not isinstance(last["content"], CountingList):
            last["content"] = CountingList(last["content"])

    monkeypatch.setattr(history_module, "_add", counted_add)
    CountingList.visits = 0
    history = load_history(path)
    assert n <= CountingList.visits <= 10 * n  # copied or scanned at each merge: over n * n
    (merged,) = [m for m in history.messages[2:] if m["role"] == "user"]
    results = [b for b in merged["content"] if b["type"] == "tool_result"]
    texts = [b["text"] for b in merged["content"] if b["type"] == "text"]
    assert [(b["tool_use_id"], b["content"]) for b in results] == [(f"c{i}", f"r{i}") for i in range(n)]
    assert texts == [f"line {i}" for i in range(n)]
    assert history.skipped == {
        "consecutive user messages merged": 2 * n - 1,
        "tool result answering no call": n,
    }


class CountingSet(set):  # type: ignore[type-arg]
    """A set that counts membership tests."""

    tests = 0

    def __contains__(self, item: object) -> bool:
        CountingSet.tests += 1
        return super().__contains__(item)


class CountingHistory(History):
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._ids = CountingSet()


def _repeated_id_turns(n: int) -> list[dict[str, Any]]:
    messages: list[dict[str, Any]] = [{"role": "user", "content": "go"}]
    for i in range(n):
        call = {"type": "tool_use", "id": "a", "name": "bash", "input": {"n": i}}
        messages.append({"role": "assistant", "content": [call]})
        messages.append(
            {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "a", "content": f"r{i}"}]}
        )
    return messages


def test_a_repeated_call_id_is_renamed_without_trying_every_earlier_name(tmp_path, monkeypatch):
    """n calls all with id "a": each new name is found in a few tests of the ids taken (trying "a",
    "a_2"... from the start each time would be n*n/2), and each result still answers its own call."""
    n = 3000
    path = _lines(tmp_path / "ids.jsonl", _repeated_id_turns(n))
    monkeypatch.setattr(history_module, "History", CountingHistory)
    CountingSet.tests = 0
    history = load_history(path)
    assert n <= CountingSet.tests <= 5 * n  # (counted at all, and few)
    ids = [b["id"] for m in history.messages if m["role"] == "assistant" for b in m["content"]]
    assert ids == ["a"] + [f"a_{k}" for k in range(2, n + 1)]
    answers = [(b["tool_use_id"], b["content"]) for m in history.messages[2::2] for b in m["content"]]
    assert answers == list(zip(ids, (f"r{i}" for i in range(n)), strict=True))


def test_the_largest_histories_allowed_load_the_same(tmp_path):
    """At the message cap: consecutive user messages, a call id repeated in every turn, and one turn of
    many calls with one id (each result keeps its own call, in order), each whole."""
    merged = _lines(
        tmp_path / "merged.jsonl",
        [{"role": "user", "content": f"line {i}"} for i in range(MAX_MESSAGES - 1)]
        + [{"role": "assistant", "content": "done"}],
    )
    history = load_history(merged)
    assert [b["text"] for b in history.messages[0]["content"]] == [
        f"line {i}" for i in range(MAX_MESSAGES - 1)
    ]
    repeated = _lines(tmp_path / "ids.jsonl", _repeated_id_turns((MAX_MESSAGES - 1) // 2))
    history = load_history(repeated)
    assert history.turns == (MAX_MESSAGES - 1) // 2
    assert len({b["id"] for m in history.messages[1::2] for b in m["content"]}) == history.turns
    n = 10_000
    one_turn = _lines(
        tmp_path / "one-turn.jsonl",
        [
            {"role": "user", "content": "go"},
            {
                "role": "assistant",
                "content": [
                    {"type": "tool_use", "id": "a", "name": "bash", "input": {"n": i}} for i in range(n)
                ],
            },
            {
                "role": "user",
                "content": [
                    {"type": "tool_result", "tool_use_id": "a", "content": f"r{i}"} for i in range(n)
                ],
            },
        ],
    )
    history = load_history(one_turn)
    calls = [(b["id"], b["input"]["n"]) for b in history.messages[1]["content"]]
    answers = [(b["tool_use_id"], b["content"]) for b in history.messages[2]["content"]]
    assert [f"r{i}" for _, i in calls] == [content for _, content in answers]
    assert [c for c, _ in calls] == [a for a, _ in answers] == ["a"] + [f"a_{k}" for k in range(2, n + 1)]


# --dump


def _dumped_history(directory: Path, name: str) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / name
    path.write_text('{"system":"s"}\n' + TRANSCRIPT)
    return path


def test_a_history_named_dots_is_dumped_inside_the_dump_directory(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _dumped_history(tmp_path / "hist", "...jsonl")
    _dumped_history(tmp_path / "hist", ".hidden.jsonl")
    out = tmp_path / "parent" / "out"
    out.mkdir(parents=True)
    precious = tmp_path / "parent" / "1.json"
    precious.write_text('{"precious": true}\n')
    assert main(["replay", str(tmp_path / "hist"), "--dump", str(out), "--json"]) == 0
    document = json.loads(capsys.readouterr().out)
    assert sorted(f["file"] for f in document["files"]) == ["...jsonl", ".hidden.jsonl"]
    assert precious.read_text() == '{"precious": true}\n'
    assert sorted(str(p.relative_to(out)) for p in out.rglob("*.json")) == ["__/1.json", "_hidden/1.json"]


def test_dump_parts_are_children_never_dots():
    assert dump_parts("a.jsonl") == ["a"]
    assert dump_parts("job/transcript.jsonl") == ["job", "transcript"]
    assert dump_parts("...jsonl") == ["__"]
    assert dump_parts(".jsonl") == ["_"]
    assert dump_parts("../../etc/x.jsonl") == ["__", "__", "etc", "x"]
    assert dump_parts("/abs//x.jsonl") == ["_", "abs", "_", "x"]
    assert dump_parts(".../.a.b.jsonl") == ["___", "_a.b"]


def _planted(tmp_path: Path, plant: str) -> tuple[Path, Path, Path]:
    """A history ``h.jsonl``, a dump directory ``out`` and a file ``outside`` it, with ``plant`` where
    the history's first request would be dumped."""
    history = _dumped_history(tmp_path / "hist", "h.jsonl")
    out = tmp_path / "out"
    out.mkdir()
    outside = tmp_path / "outside"
    outside.mkdir()
    precious = outside / "1.json"
    precious.write_text("precious\n")
    if plant == "directory link":
        (out / "h").symlink_to(outside)
    else:
        (out / "h").mkdir()
        if plant == "file link":
            (out / "h" / "1.json").symlink_to(precious)
        elif plant == "hard link":
            os.link(precious, out / "h" / "1.json")
    return history, out, precious


@pytest.mark.parametrize("plant", ["directory link", "file link", "hard link"])
def test_a_planted_link_in_the_dump_directory_is_never_written_through(tmp_path, capsys, monkeypatch, plant):
    monkeypatch.chdir(tmp_path)
    history, out, precious = _planted(tmp_path, plant)
    assert main(["replay", str(history), "--dump", str(out)]) == 2
    err = capsys.readouterr().err
    assert "cannot dump a request there" in err and str(out / "h") in err
    assert precious.read_text() == "precious\n"


def test_a_planted_fifo_in_the_dump_directory_is_one_error_line_not_a_hang(tmp_path):
    history = _dumped_history(tmp_path / "hist", "h.jsonl")
    (tmp_path / "out" / "h").mkdir(parents=True)
    os.mkfifo(tmp_path / "out" / "h" / "1.json")
    done = run_cli_process("replay", str(history), "--dump", "out", cwd=tmp_path, timeout=120)
    assert done.returncode == 2
    (line,) = _errors(done.stderr)
    assert line.startswith(f"error: {Path('out') / 'h' / '1.json'}: cannot dump a request there")


def test_a_dump_over_an_earlier_one_rewrites_it_whole(tmp_path, capsys, monkeypatch):
    monkeypatch.chdir(tmp_path)
    history = _dumped_history(tmp_path / "hist", "h.jsonl")
    (tmp_path / "out" / "h").mkdir(parents=True)
    (tmp_path / "out" / "h" / "1.json").write_text("x" * 100_000)
    assert main(["replay", str(history), "--dump", "out"]) == 0
    assert json.loads((tmp_path / "out" / "h" / "1.json").read_text())["messages"]


# the message cap


def test_a_history_over_the_message_cap_is_one_error_line_at_the_first_line_over(tmp_path, capsys):
    line = (
        json.dumps({"role": "user", "content": "x"})
        + "\n"
        + json.dumps({"role": "assistant", "content": "y"})
    )
    path = tmp_path / "long.jsonl"
    path.write_text(
        '{"system": "s"}\n' + "\n".join([line] * (MAX_MESSAGES // 2)) + "\n\n{oops\n" + line + "\n"
    )
    assert main(["replay", str(path)]) == 2
    first_over = 1 + MAX_MESSAGES + 2  # the header, the messages, a blank line: the JSON error is not reached
    assert capsys.readouterr().err.strip().splitlines()[-1] == (
        f"error: {path}:{first_over}: over {MAX_MESSAGES:,} messages, the most a history may hold"
    )
    path.write_text('{"system": "s"}\n' + "\n".join([line] * (MAX_MESSAGES // 2)) + "\n")
    assert len(load_history(path).messages) == MAX_MESSAGES


def test_dump_into_a_file_is_one_error_line(tmp_path):
    """--dump naming a file, not a directory: one line naming it, exit 2 (it was a FileExistsError
    traceback)."""
    job = _job(tmp_path)
    (tmp_path / "taken").write_text("a file\n")
    done = subprocess.run(
        runner_argv("replay", str(job), "--dump", str(tmp_path / "taken")),
        cwd=tmp_path,
        env=runner_env(),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    [line] = _errors(done.stderr)
    assert line.startswith(f"error: {tmp_path / 'taken'}") and "cannot dump a request there" in line, line
    assert (tmp_path / "taken").read_text() == "a file\n"
