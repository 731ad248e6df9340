"""What an operator sees (layer 4 of ARCHITECTURE.md): the live progress display, the run table,
text made safe for a terminal, and the HTML viewer of a run.

Reads the run directory and a job's progress and result (``agent``); imports no executor. Imported by
``execution`` (a batch drives the display it is given) and the command line (``cli``, ``commands``),
which prints through :mod:`.console`.
"""
