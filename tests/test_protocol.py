"""The markers the runner writes in place of what it removed, recognized by the one classifier next to
their texts (``runner.protocol.marker_of``), which the viewer uses; and the compaction stages' names
(``Stage``), which are what events.jsonl and the compaction counts have always spelled."""

from __future__ import annotations

import json

import pytest

from runner.compaction.stages import SUMMARY_STAGES, Stage
from runner.protocol import (
    COMPACTED,
    REACTIVE_COMPACT,
    Marker,
    archived_marker,
    is_snip_marker,
    marker_of,
    persisted_marker,
    placeholder,
    summary_text,
    transcript_range,
)
from runner.ui.report import short_name
from runner.ui.viewer.charts import OTHER_STAGE_COLOR, stage_color
from runner.ui.viewer.pages import is_marker, summary_label

MARKERS = [
    (summary_text(COMPACTED, "Survey.", "- read a.py", where="transcript.jsonl"), Marker.SUMMARY),
    (summary_text(REACTIVE_COMPACT, "Survey.", "- read a.py", where="transcript.jsonl"), Marker.SUMMARY),
    (persisted_marker("tool-results/t1.txt", "x" * 5_000, 100), Marker.PERSISTED),
    (placeholder("tool-results/t1.txt"), Marker.PLACEHOLDER),
    (archived_marker(12, transcript_range(3, 14), "Digest of the archived messages"), Marker.SNIP),
    (archived_marker(12, "transcript.jsonl"), Marker.SNIP),  # a marker naming no range
]


@pytest.mark.parametrize(("text", "kind"), MARKERS)
def test_each_marker_is_classified_and_shown_as_one(text: str, kind: Marker) -> None:
    assert marker_of(text) is kind
    assert is_marker(text) and is_marker("\n  " + text)  # the viewer: after leading blank space too


@pytest.mark.parametrize(
    "text",
    [
        "",
        "def f(): pass",
        "Compacted",
        "[Compacted",
        "[12 messages",
        "[x messages archived: y]",
        "see [Compacted] above",
        "persisted-output",
        "[Earlier tool result compacted.",
    ],
)
def test_other_texts_are_no_marker(text: str) -> None:
    assert marker_of(text) is None and not is_marker(text)
    assert not is_snip_marker(text)


def test_the_stages_are_the_names_on_disk_with_a_label_and_a_colour() -> None:
    assert json.dumps({Stage.SNIP: 1, "x": Stage.COMPACT_HISTORY}) == '{"snip": 1, "x": "compact_history"}'
    assert [str(s) for s in Stage] == [
        "tool_result_budget",
        "snip",
        "micro_compact",
        "fit_tool_results",
        "compact_history",
        "reactive_compact",
        "compact_tool",
        "server_compaction",
        "tool_use_clearing",
        "observation_mask",
    ]
    assert len({s.color for s in Stage}) == len(Stage) and OTHER_STAGE_COLOR not in {s.color for s in Stage}
    assert short_name("micro_compact") == "micro" and short_name("summary_failed") == "summary_failed"
    assert stage_color("snip") == Stage.SNIP.color and stage_color("?") == OTHER_STAGE_COLOR
    assert Stage.named("reactive_compact") is Stage.REACTIVE_COMPACT and Stage.named("model_call") is None


def test_the_viewer_names_the_summary_each_history_compaction_wrote() -> None:
    assert {s: summary_label(s) for s in SUMMARY_STAGES} == {
        Stage.COMPACT_HISTORY: f"[{COMPACTED}]",
        Stage.COMPACT_TOOL: f"[{COMPACTED}]",
        Stage.REACTIVE_COMPACT: f"[{REACTIVE_COMPACT}]",
    }
    assert summary_label(Stage.SNIP) is None and summary_label("model_call") is None
