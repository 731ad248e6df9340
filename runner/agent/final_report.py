"""A job's last files, for every ending: ``final.md`` (the model's answer, or a partial report that
says so at its top) and ``metrics.json``.

Guarantees:
- A job that did not succeed still leaves a report; its first line says it is partial, with the
  job's status and the reason, so a reader never mistakes it for a finished one.
- The last turn's queued lines are written before the final files; a job whose last turn could not
  be written is not ``succeeded`` (``disk_quota`` on its quota, its error says so otherwise).
- ``metrics.json`` is written last, through the disk reserve: a job whose metrics say succeeded has
  its ``final.md``; a disk that fails is named in the record's error, never hides the job's outcome.
"""

from __future__ import annotations

from ..compaction.fallback import fallback_summary
from ..messages import Message
from ..rundir.docs import FINAL, METRICS, JobMetrics, Status
from ..rundir.reserve import final_write
from ..rundir.store import DiskQuotaExceeded, JobStore

FALLBACK_CHARS = 20_000


def partial_header(status: str, reason: str | None) -> str:
    return (
        f"> **Partial report** (status `{status}`: {reason or 'no reason recorded'}). The job did not "
        "finish; what follows was written from what it had gathered by then.\n\n"
    )


def final_markdown(status: str, reason: str | None, answer: str | None, *, history: list[Message]) -> str:
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


async def write_final_documents(
    record: JobMetrics, store: JobStore, *, answer: str | None, history: list[Message]
) -> None:
    """The last turn's queued lines, then ``final.md`` (unless a succeeded job has no answer), then
    ``metrics.json``; what could not be written is added to ``record.error``."""
    run_dir = store.dir.parent
    try:  # the last turn's queued lines (a cancelled or failed turn's too) go before the final files
        await store.flush()
    except DiskQuotaExceeded as e:  # the last turn is not on disk: not a success
        if record.status == Status.SUCCEEDED:
            record.status, record.error = Status.DISK_QUOTA, e.strerror
        else:
            record.error = (record.error or "") + f" (could not write the last turn's lines: {e.strerror})"
    except (OSError, ValueError) as e:
        record.error = (record.error or "") + f" (could not write the last turn's lines: {e})"
    if record.status != Status.SUCCEEDED or answer is not None:
        text = final_markdown(record.status, record.error, answer, history=history)
        try:
            await final_write(run_dir, lambda: store.write_text(FINAL, text))
        except OSError as e:  # the disk failed us: say so in the record, do not hide the job's own outcome
            record.error = (record.error or "") + f" (could not write {FINAL}: {e})"
    try:  # written last: a job whose metrics say succeeded has its final.md
        await final_write(
            run_dir,
            lambda: store.write_json(METRICS, record.document()),
            lambda: store.overwrite_json(METRICS, record.document()),
        )
    except OSError as e:
        record.error = (record.error or "") + f" (could not write {METRICS}: {e})"
