"""The run directory's documents: written as they always were, read back without a traceback."""

from __future__ import annotations

import json
from pathlib import Path

from runner.pricing import USAGE_KEYS, Usage, sum_usage
from runner.rundir.docs import (
    EVENTS,
    METRICS,
    RUN_JSON,
    CompactionEvent,
    JobMetrics,
    ModelCallEvent,
    OtherEvent,
    RetriesEvent,
    RunDocument,
    SummaryFailedEvent,
    WorkerLostEvent,
    event_lines,
    lenient,
    load_run,
    parse_event,
    read_model,
    run_document,
    run_json_text,
)
from runner.rundir.lock import hold_run_dir
from runner.ui.report import load_report

# metrics.json as the runner wrote it before the documents were models (key order included)
OLD_METRICS = (
    '{"job": "a", "status": "max_turns", "model": "m", "turns": 7, "wall_s": 1.235, '
    '"usage": {"input_tokens": 10, "output_tokens": 2, "cache_creation_input_tokens": 3, '
    '"cache_read_input_tokens": 4}, "summarizer_usage": {"input_tokens": 1, "output_tokens": 1, '
    '"cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}, "usage_estimated": true, '
    '"cost_usd": 0.012346, "compactions": {"micro_compact": 1, "snip": 2}, "persisted_bytes": 99, '
    '"retries": 3, "rate_limited_429": 1, "overloaded_529": 2, "server_errors_5xx": 0, "requests": 13, '
    '"error": "reached max_turns", "worker": {"node": "n1", "pid": 5}}'
)


TOTAL_USAGE = (
    ', "total_usage": {"input_tokens": 11, "output_tokens": 3, "cache_creation_input_tokens": 3, '
    '"cache_read_input_tokens": 4}'
)


def test_metrics_json_is_written_byte_for_byte_as_before() -> None:
    result = JobMetrics(job="a", status="max_turns", model="m")
    result.turns, result.wall_s, result.cost_usd = 7, 1.23456, 0.0123456
    result.usage.add(
        Usage(input_tokens=10, output_tokens=2, cache_creation_input_tokens=3, cache_read_input_tokens=4)
    )
    result.summarizer_usage.add(Usage(input_tokens=1, output_tokens=1))
    result.count("snip"), result.count("snip"), result.count("micro_compact")
    result.persisted_bytes, result.error, result.usage_estimated = 99, "reached max_turns", True
    result.worker = {"node": "n1", "pid": 5}
    result.requests, result.retries, result.rate_limited_429, result.overloaded_529 = 13, 3, 1, 2
    result.context_chars, result.started = 1234, 5.0  # live fields: never written
    # an earlier metrics.json's fields byte for byte, then the derived total_usage (its own calls',
    # summaries' and subagents' usage together: written, never read back)
    assert json.dumps(result.document()) == OLD_METRICS[:-1] + TOTAL_USAGE + "}"
    no_worker = JobMetrics(job="b", status="succeeded").document()
    assert (
        "worker" not in no_worker
        and "source" not in no_worker
        and list(no_worker)[-2:] == ["error", "total_usage"]
    )


def test_run_json_rows_of_an_earlier_run_are_rewritten_unchanged(tmp_path: Path) -> None:
    rows = [OLD_METRICS[:-1] + ', "source": "/t/a.md"}', '{"job": "b", "status": "running", "turns": 3}']
    head = (
        '{"run_id": "r1", "state": "finished", "started": 1.5, "updated": 2.5, "backend": "offline", '
        '"model": "m", "summary_model": "s", "concurrency": 2, "totals": {"jobs": 2}, "jobs": [\n    '
    )
    text = head + ",\n    ".join(rows) + "\n]}\n"
    document, problems = lenient(RunDocument, json.loads(text), RUN_JSON)
    assert problems == [] and document is not None
    written = run_json_text(document)
    # the job rows and the closing byte for byte, each row with its derived total_usage after its fields
    rewritten = text.replace(', "source": "/t/a.md"}', ', "source": "/t/a.md"' + TOTAL_USAGE + "}")
    assert written.split("\n")[1:] == rewritten.split("\n")[1:]
    assert json.loads(written)["backend"] == "offline" and list(json.loads(written))[:4] == [
        "run_id",
        "state",
        "started",
        "updated",
    ]


def test_a_damaged_metrics_json_names_the_file_and_field_and_keeps_the_rest(tmp_path: Path) -> None:
    path = tmp_path / METRICS
    path.write_text(
        json.dumps(
            {
                "job": "a",
                "status": "failed",
                "turns": "many",
                "usage": {"input_tokens": True, "output_tokens": 5},
                "cost_usd": "1$",
                "compactions": {"snip": "x", "micro": 2},
            }
        )
    )
    metrics, problems = read_model(path, JobMetrics)
    assert metrics is not None
    assert (metrics.status, metrics.turns, metrics.cost_usd, metrics.usage.output_tokens) == (
        "failed",
        0,
        0.0,
        5,
    )
    assert metrics.usage.input_tokens == 0 and metrics.compactions == {"micro": 2}
    assert sorted(p.split(": ")[1] for p in problems) == [
        "compactions.snip",
        "cost_usd",
        "turns",
        "usage.input_tokens",
    ]
    assert all(p.startswith(str(path)) and "\n" not in p for p in problems)
    for junk in ("[1, 2]", "{not json", ""):
        path.write_text(junk)
        metrics, problems = read_model(path, JobMetrics)
        assert metrics is None and len(problems) == 1 and problems[0].startswith(str(path))


def test_each_event_kind_reads_back_as_its_model_and_unknown_stages_are_kept() -> None:
    events = [
        CompactionEvent(
            stage="snip",
            messages_before=9,
            messages_after=5,
            chars_before=900,
            chars_after=100,
            paths=["tool-results/x.txt"],
            cache_invalidated_from=2,
        ),
        ModelCallEvent(turn=1, chars=100, tokens=30, estimated=False, cost_usd=0.5),
        RetriesEvent(attempts=3, rate_limited_429=1, overloaded_529=1, server_errors_5xx=0),
        WorkerLostEvent(worker={"pid": 1}, continue_from_message=4, turns_rerun=1),
        SummaryFailedEvent(error="boom", consecutive_failures=2),
    ]
    lines = [json.loads(line) for line in event_lines(events).splitlines()]
    assert [line["stage"] for line in lines] == [
        "snip",
        "model_call",
        "retries",
        "worker_lost",
        "summary_failed",
    ]
    assert all(list(line)[:2] == ["ts", "stage"] for line in lines)
    for event, line in zip(events, lines, strict=True):
        parsed, problem = parse_event(line)
        assert problem is None and type(parsed) is type(event) and parsed == event
    future, problem = parse_event({"ts": 1.0, "stage": "a_newer_stage", "anything": [1]})
    assert problem is None and isinstance(future, OtherEvent) and future.line()["anything"] == [1]
    damaged, problem = parse_event({"ts": 1.0, "stage": "model_call", "turn": "x"}, "j/events.jsonl")
    assert isinstance(damaged, OtherEvent) and problem is not None and problem.startswith("j/events.jsonl: ")


def _write(path: Path, data: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(data))


def test_report_and_report_json_read_one_run_the_same_way(tmp_path: Path) -> None:
    run_dir = tmp_path / "r"
    _write(
        run_dir / RUN_JSON,
        {
            "run_id": "r",
            "state": "running",
            "backend": "offline",
            "totals": {"jobs": 99},
            "jobs": [
                {"job": "a", "status": "queued", "turns": 0},
                {"job": "b", "status": "queued", "turns": 0},
            ],
        },
    )
    _write(
        run_dir / "a" / METRICS,
        {
            "job": "a",
            "status": "stuck",
            "turns": 4,
            "cost_usd": 0.25,
            "usage": {"input_tokens": 100},
            "summarizer_usage": {"input_tokens": 7},
        },
    )
    _write(run_dir / "c" / METRICS, {"job": "c", "status": "succeeded", "turns": 2, "cost_usd": 0.5})
    (run_dir / "a" / EVENTS).write_text("")
    with hold_run_dir(run_dir):  # its writer is alive: the run is in progress
        report, document, run = load_report(run_dir), run_document(run_dir), load_run(run_dir)
    expected = {
        "jobs": 3,
        "turns": 6,
        "cost_usd": 0.75,
        "stuck": 1,
        "queued": 1,
        "succeeded": 1,
        "input_tokens": 107,
    }
    for totals in (report["totals"], document["totals"]):
        assert {k: v for k, v in totals.items() if v} == expected
    assert [(j["job"], j["status"]) for j in document["jobs"]] == [
        ("a", "stuck"),
        ("b", "queued"),
        ("c", "succeeded"),
    ]
    assert document["jobs"][1] == {"job": "b", "status": "queued", "turns": 0}  # the fields on disk, no more
    assert report["backend"] == document["backend"] == "offline"
    assert [j.status for j in run.jobs] == ["stuck", "queued", "succeeded"]


def test_a_jobs_total_usage_is_the_sum_of_its_parts_key_by_key() -> None:
    """``total_usage`` (every document's) and ``usage_total`` (the live display's, per key) are one sum:
    the job's own calls', its summaries' and its subagents', each count alone."""
    parts = {
        "usage": Usage(
            input_tokens=1, output_tokens=2, cache_creation_input_tokens=3, cache_read_input_tokens=4
        ),
        "summarizer_usage": Usage(
            input_tokens=10, output_tokens=20, cache_creation_input_tokens=5, cache_creation_1h_input_tokens=5
        ),
        "subagent_usage": Usage(input_tokens=100, cache_read_input_tokens=400),
    }
    record = JobMetrics(job="j", **parts)
    total = record.total_usage()
    assert total.to_json() == {
        "input_tokens": 111,
        "output_tokens": 22,
        "cache_creation_input_tokens": 8,
        "cache_read_input_tokens": 404,
        "cache_creation_1h_input_tokens": 5,
    }
    assert {key: record.usage_total(key) for key in USAGE_KEYS} == {
        key: getattr(total, key) for key in USAGE_KEYS
    }
    assert sum_usage([record, record]).to_json() == {k: 2 * v for k, v in total.to_json().items()}
    assert parts["usage"].input_tokens == 1  # the parts are not changed by summing them
