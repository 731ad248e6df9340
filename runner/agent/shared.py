"""What the jobs of one executor share: the model, the Compactor (its Summarizer holds the batch's
summary gate), the price table, the run's budget and deadline. An executor builds one
:class:`Services` (in its process, or on each Ray worker over the cluster-wide services) and hands
it to :func:`~runner.agent.runjob.run_job`; a subagent's session runs on its parent's, with its share
of the budget."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..compaction.compactor import Compactor
from ..models.base import Model
from ..pricing import PriceTable
from ..services import Budget, RunBudget


@dataclass
class Services:
    """What a job uses besides its own files, shared by the jobs of an executor."""

    model: Model
    compactor: Compactor  # its Summarizer holds the batch's summary gate
    summary_model: str
    prices: PriceTable = field(default_factory=PriceTable)
    budget: Budget = field(default_factory=RunBudget)
    deadline: float | None = None  # epoch seconds by which every job has ended (the run's deadline)
