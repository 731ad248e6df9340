"""``final.md`` for every ending: the model's answer, or a partial report that says so at its top.

Guarantee: a job that did not succeed still leaves a report; its first line says it is partial,
with the job's status and the reason, so a reader never mistakes it for a finished one.
"""

from __future__ import annotations

from ..compaction.fallback import fallback_summary
from ..messages import Message
from ..rundir.docs import Status

FALLBACK_CHARS = 20_000


def partial_header(status: str, reason: str | None) -> str:
    return (
        f"> **Partial report** (status `{status}`: {reason or 'no reason recorded'}). The job did not "
        "finish; what follows was written from what it had gathered by then.\n\n"
    )


def final_markdown(status: str, reason: str | None, answer: str | None, history: list[Message]) -> str:
    """The text of ``final.md``: ``answer`` as it is for a job that succeeded; otherwise the partial
    header over ``answer`` (the last call's report) or, without one, a summary built from the history."""
    if status == Status.SUCCEEDED and answer is not None:
        return answer
    body = (
        answer
        if answer and answer.strip()
        else (
            "No report could be asked of the model; this summary was built from the conversation itself.\n\n"
            + (fallback_summary(history, FALLBACK_CHARS) if history else "(the job had not started any work)")
        )
    )
    return partial_header(status, reason) + body
