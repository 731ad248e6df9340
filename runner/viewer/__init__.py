"""``runner view``: a run as HTML that opens from disk with no network.

``RUN_DIR/index.html`` lists every job (sortable, filterable, with totals); each job has its own page
beside it (``RUN_DIR/view/<job>.html``: charts, compactions, transcript, final report), loaded only
when it is opened, so the index stays small for a run of hundreds of jobs.
"""

from __future__ import annotations

from .render import ViewResult, write_view

__all__ = ["ViewResult", "write_view"]
