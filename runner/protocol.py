"""The text protocol: every marker, placeholder and label the runner writes into a model's context,
and the parsers that recognize them.

Everything that writes or reads these texts (the compactor, the tools, the offline policy, the
emulator, the benchmarks) imports them from here, so a change of wording is one change.
"""

from __future__ import annotations

# the last request of a job about to hit a limit: answered without tools (tool_choice "none")
OUT_OF_TURNS = ("You are out of turns ({reason}); no more tool calls can run. Write your report now from what "
                "you have gathered so far, and say what you could not finish.")
NO_TOOLS = {"type": "none"}
