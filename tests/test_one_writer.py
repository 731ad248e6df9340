"""One writer for a job's money and counts: only ``runner/agent/spend.py`` writes a :class:`JobMetrics`
usage, cost or call-count field; every other module of ``runner/`` is parsed with ``ast`` and fails
this test when it assigns one (``x.f = ...``, ``x.f += ...``, ``x.f: T = ...``), sets one by
``setattr(x, "f", ...)`` (or ``setattr(record, ...)`` whatever the name), or adds to one in place
(``x.f.add(...)``).

The fields are :data:`SPEND_FIELDS`, derived from ``JobMetrics.model_fields`` by one rule: a field that
holds a :class:`~runner.pricing.Usage`, or one ``rundir/docs.py`` declares spend (``Annotated[...,
SPENT]``). A new usage field is covered without anyone listing it.

What the checker cannot see the type of, it takes for a record. It passes over only what it can see
is something else: ``self.f`` inside a class other than ``JobMetrics`` (an object's own counter), and
a local name the function annotates, or binds by calling a class, as another type."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

from runner.pricing import Usage
from runner.rundir.docs import SPENT, JobMetrics

ROOT = Path(__file__).resolve().parent.parent
RUNNER = ROOT / "runner"
WRITER = RUNNER / "agent" / "spend.py"
RECORD = "JobMetrics"

SPEND_FIELDS = frozenset(
    name for name, f in JobMetrics.model_fields.items() if f.annotation is Usage or SPENT in f.metadata
)


def _type_name(annotation: ast.expr | None) -> str | None:
    """The text of an annotation (a string annotation's too), or None."""
    if annotation is None:
        return None
    if isinstance(annotation, ast.Constant) and isinstance(annotation.value, str):
        return annotation.value
    return ast.unparse(annotation)


def _class_called(value: ast.expr | None) -> str | None:
    """``Name`` when ``value`` is a call of a name that looks like a class (``FileReport(...)``)."""
    if isinstance(value, ast.Call):
        func = value.func
        name = func.id if isinstance(func, ast.Name) else func.attr if isinstance(func, ast.Attribute) else ""
        if name[:1].isupper():
            return name
    return None


class _Checker(ast.NodeVisitor):
    def __init__(self, where: str):
        self.where = where
        self.classes: list[str] = []
        self.others: list[set[str]] = [set()]  # local names seen to be of another type, per function
        self.found: list[str] = []

    # --- scopes ---

    def visit_ClassDef(self, node: ast.ClassDef) -> None:
        self.classes.append(node.name)
        self.generic_visit(node)
        self.classes.pop()

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        others = set()
        args = node.args
        for arg in [*args.posonlyargs, *args.args, *args.kwonlyargs]:
            kind = _type_name(arg.annotation)
            if kind is not None and RECORD not in kind:
                others.add(arg.arg)
        for sub in ast.walk(node):
            if isinstance(sub, ast.AnnAssign) and isinstance(sub.target, ast.Name):
                kind = _type_name(sub.annotation)
                if kind is not None and RECORD not in kind:
                    others.add(sub.target.id)
            elif isinstance(sub, ast.Assign) and len(sub.targets) == 1:
                target, called = sub.targets[0], _class_called(sub.value)
                if isinstance(target, ast.Name) and called is not None and called != RECORD:
                    others.add(target.id)
        self.others.append(others)
        self.generic_visit(node)
        self.others.pop()

    visit_FunctionDef = _function
    visit_AsyncFunctionDef = _function

    # --- what is a record ---

    def _not_a_record(self, base: ast.expr) -> bool:
        if isinstance(base, ast.Name):
            if base.id == "self":
                return bool(self.classes) and self.classes[-1] != RECORD
            return base.id in self.others[-1]
        return False

    def _report(self, node: ast.AST, what: str) -> None:
        self.found.append(f"{self.where}:{getattr(node, 'lineno', '?')}: {what}")

    def _target(self, target: ast.expr, node: ast.AST) -> None:
        if isinstance(target, ast.Tuple | ast.List):
            for element in target.elts:
                self._target(element, node)
        elif isinstance(target, ast.Starred):
            self._target(target.value, node)
        elif isinstance(target, ast.Attribute) and target.attr in SPEND_FIELDS:
            if not self._not_a_record(target.value):
                self._report(node, f"assigns {ast.unparse(target)}")

    # --- writes ---

    def visit_Assign(self, node: ast.Assign) -> None:
        for target in node.targets:
            self._target(target, node)
        self.generic_visit(node)

    def visit_AugAssign(self, node: ast.AugAssign) -> None:
        self._target(node.target, node)
        self.generic_visit(node)

    def visit_AnnAssign(self, node: ast.AnnAssign) -> None:
        if node.value is not None:
            self._target(node.target, node)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        func = node.func
        if isinstance(func, ast.Name) and func.id == "setattr" and node.args:
            obj = node.args[0]
            name = node.args[1] if len(node.args) > 1 else None
            if isinstance(obj, ast.Name) and obj.id == "record":
                self._report(node, f"calls {ast.unparse(node)}")
            elif isinstance(obj, ast.Name) and obj.id == "self" and self.classes[-1:] == [RECORD]:
                self._report(node, f"calls {ast.unparse(node)}")  # a record setting any of its fields
            elif (
                isinstance(name, ast.Constant) and name.value in SPEND_FIELDS and not self._not_a_record(obj)
            ):
                self._report(node, f"calls {ast.unparse(node)}")
        elif (
            isinstance(func, ast.Attribute)
            and func.attr == "add"
            and isinstance(func.value, ast.Attribute)
            and func.value.attr in SPEND_FIELDS
            and not self._not_a_record(func.value.value)
        ):
            self._report(node, f"calls {ast.unparse(func)}(...)")
        self.generic_visit(node)


def violations(source: str, where: str = "<source>") -> list[str]:
    """Every write of a spend field of a record in ``source`` (a module's text)."""
    checker = _Checker(where)
    checker.visit(ast.parse(source))
    return checker.found


def _modules() -> Iterator[Path]:
    for path in sorted(RUNNER.rglob("*.py")):
        if path != WRITER:
            yield path


def test_the_fields_are_the_ones_of_money_and_counts() -> None:
    # the rule finds at least these (a new usage field is found without being named anywhere)
    assert {
        "usage",
        "summarizer_usage",
        "batch_usage",
        "batch_summarizer_usage",
        "subagent_usage",
        "cost_usd",
        "usage_estimated",
        "requests",
        "rate_limited_429",
        "overloaded_529",
        "server_errors_5xx",
        "retries",
        "batch_calls",
        "turns",
    } <= SPEND_FIELDS
    # and nothing that others count: the compactor's, the session's clock, the identity
    assert not SPEND_FIELDS & {"compactions", "persisted_bytes", "wall_s", "status", "error", "job"}


def test_only_spend_writes_a_jobs_money_and_counts() -> None:
    found = [v for path in _modules() for v in violations(path.read_text(), str(path.relative_to(ROOT)))]
    assert found == []


def test_no_setattr_on_a_record_anywhere() -> None:
    hits = [
        f"{path.relative_to(ROOT)}:{n}"
        for path in sorted(RUNNER.rglob("*.py"))
        for n, line in enumerate(path.read_text().splitlines(), 1)
        if "setattr(record" in line
    ]
    assert hits == []


@pytest.mark.parametrize(
    "source",
    [
        "def f(record):\n    record.turns += 1\n",
        "def f(state):\n    state.record.usage = None\n",
        "def f(state, u):\n    state.record.summarizer_usage.add(u)\n",
        "def f(record, part, v):\n    setattr(record, part, v)\n",
        "def f(x, v):\n    setattr(x, 'batch_calls', v)\n",
        "def f(r):\n    r.requests, r.retries = 1, 2\n",
        "class JobMetrics:\n    def g(self):\n        self.cost_usd = 1.0\n",
        "class S:\n    def g(self):\n        self.record.rate_limited_429 += 1\n",
        "def f(r):\n    r.cost_usd: float = 1.0\n",
        "class JobMetrics:\n    def g(self, o, n):\n        setattr(self, n, getattr(o, n))\n",
    ],
)
def test_the_checker_catches_a_write(source: str) -> None:
    assert violations(source), source


@pytest.mark.parametrize(
    "source",
    [
        "class Totals:\n    def add(self, row):\n        self.turns += row.turns\n",  # its own counter
        "def f(h):\n    report = FileReport(file=h)\n    report.turns += 1\n    report.usage.add(1)\n",
        "def f(report: 'FileReport'):\n    report.requests += 1\n",
        "def f(record):\n    n = record.turns + 1\n    record.status = 'failed'\n",  # a read; another field
    ],
)
def test_the_checker_passes_what_is_not_a_record_write(source: str) -> None:
    assert violations(source) == []
