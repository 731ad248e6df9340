"""The offline stand-in: a deterministic surveyor for trying the runner without an API key.

It is not the product and the runtime does not serve it: it answers requests through the ``Model``
protocol alone (:class:`.model.OfflineModel`), and only the backend switch
(``runner/execution/backend.py``) constructs it, for ``backend = "offline"`` and for the emulator's
default replies. It reads a conversation as a model would, from the runner's texts
(:mod:`.readback` parses them back), surveys a workspace with glob, read and grep, keeps its facts in
notes or memory files, delegates parts to subagents when ``task`` is offered, and carries a previous
report over on an incremental night. What a real model would do differently is that it reads,
plans and writes as it sees fit: every benchmark table whose outcome depends on this policy says so.

Modules: ``model`` (the ``Model``), ``policy`` (the next turn, given the conversation),
``memory_survey`` (the survey over memory files, and its report format), ``delegation`` (the
survey split across subagents), ``incremental_survey`` (a night after the first),
``incremental_parts`` (a night after a split one: the parts with no change carried over), ``listing`` (the
glob answers put together), ``readback`` (the runner's texts parsed back).
"""
