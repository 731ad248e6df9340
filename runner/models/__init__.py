"""Model backends behind one interface (layer 2 of ARCHITECTURE.md): the ``Model`` Protocol
(:mod:`.base`), the Anthropic SDK over HTTP and its wire limits, Message Batches delivery, and the
batch's adaptive concurrency.

Imports only layers 0 and 1; imported by ``compaction``, ``agent``, ``execution`` and the emulator.
"""
