"""The text protocol: every marker, placeholder and label the runner writes into a model's context,
and the parsers that recognize them.

Everything that writes or reads these texts (the compactor, the tools, the offline policy, the
emulator, the benchmarks) imports them from here, so a change of wording is one change.
"""

from __future__ import annotations
