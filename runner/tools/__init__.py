"""A job's tools and the walls around them (layer 2 of ARCHITECTURE.md): the toolset a session runs
its calls through, the file tools opened beneath the workspace, the sandbox every process runs in,
the memory tool and the repeat guard.

Imports only layers 0 and 1 (data, protocols, configuration, the run directory); imported by
``compaction``, ``agent``, ``ui``, ``execution`` and ``cli``, never by a model backend.
"""
