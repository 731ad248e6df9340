"""``runner view``: a run as HTML that opens from disk with no network.

``RUN_DIR/index.html`` lists every job (sortable, filterable, with totals); each job has its own page
beside it (``RUN_DIR/view/<job>.html``: charts, compactions, transcript, final report), loaded only
when it is opened, so the index stays small for a run of hundreds of jobs; a long transcript goes on
further pages beside it (``view/<job>.<n>.html``), so a job's page stays small for thousands of turns.
"""

from __future__ import annotations

from .render import ViewResult, write_view

__all__ = ["ViewResult", "write_view"]
