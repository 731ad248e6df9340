"""Keeping each job's history inside its window (layer 2 of ARCHITECTURE.md): the Compactor, its
pure stages, the strategies that choose among them, the summarizer, and ``context.jsonl``.

Imports layers 0 and 1 and, of its own layer, ``models`` (the summarizer's backend) and ``tools``;
imported by ``agent``, ``execution``, ``cli`` and the emulator (its fallback summary).
"""
