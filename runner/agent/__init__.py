"""The agent: one job from its prompt to its ending (layer 3 of ARCHITECTURE.md).

:func:`runner.agent.runjob.run_job` is the seam every executor calls; :mod:`.session` is the loop behind it.
Imports the layers below (data, configuration, the run directory, models, tools, compaction); imported
by ``ui`` (a job's progress and result), ``execution`` and ``cli``.
"""
