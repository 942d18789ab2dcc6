"""A folder's datasets and the graph between them, from the SQL alone (no catalog, no Airflow).

Every dataset is one managed table: a materialized view (a
``materialized_view`` group) or a continual task (a ``continual_task``
group: streaming tables, flows, ``CREATE CONTINUAL TASK``). A temporary
view is no dataset: it is inlined into its readers. A dataset that reads
another dataset of the folder ticks after it, at the same time; a cycle is
refused, naming each statement on it.

Several flows into one streaming table (decision, docs/pipelines.md): each
flow is a continual task of its own into ``<table>__<flow>``, and the table
is the materialized view ``UNION ALL`` of them (incremental: linear). A
continual task has one input and one owner, so flows over different
sources cannot share one.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlglot import exp

from airflow_provider_ct.core.continual import parse_continual_task
from airflow_provider_ct.exceptions import PipelineError, QueryError
from airflow_provider_ct.pipelines.python import read_python
from airflow_provider_ct.pipelines.queries import (
    Query,
    inline,
    parse_statement_query,
    qualify_name,
)
from airflow_provider_ct.pipelines.spec import PipelineSpec
from airflow_provider_ct.pipelines.statements import (
    CONTINUAL_TASK,
    FLOW,
    MATERIALIZED_VIEW,
    STREAMING_TABLE,
    TEMPORARY_VIEW,
    Statement,
    read_statements,
)


@dataclass
class Dataset:
    """One managed table of the pipeline."""

    name: str
    #: ``materialized view`` or ``continual task``.
    kind: str
    statement: Statement
    #: The query with temporary views inlined (a view's, or a streaming table's SELECT).
    tree: Any = None
    #: A continual task's input (its ``STREAM(...)`` source).
    stream: str | None = None
    #: Every table read (normalized), after inlining.
    reads: tuple[str, ...] = ()
    #: The temporary views inlined into it.
    via: tuple[str, ...] = ()
    #: Flows into this table that became datasets of their own.
    flows: tuple[str, ...] = ()
    #: A ``CREATE CONTINUAL TASK``'s declared columns (name, Spark type).
    columns: tuple[tuple[str, str], ...] = ()


@dataclass
class Pipeline:
    spec: PipelineSpec
    catalog: str
    datasets: dict[str, Dataset]
    #: Datasets in an order where each comes after every dataset it reads.
    order: list[str]
    temporary: dict[str, Statement] = field(default_factory=dict)

    def upstream(self, name: str) -> list[str]:
        return [r for r in self.datasets[name].reads if r in self.datasets]

    def external(self) -> dict[str, tuple[Statement, int]]:
        """Tables read that the pipeline does not define, with the first statement reading each."""
        found: dict[str, tuple[Statement, int]] = {}
        for name in self.order:
            dataset = self.datasets[name]
            for table in dataset.reads:
                if table not in self.datasets and table not in found:
                    found[table] = (dataset.statement, dataset.statement.line)
        return found


def build_pipeline(spec: PipelineSpec, catalog: str) -> Pipeline:
    """Read every file of ``spec``, resolve names, inline temporary views, refuse cycles."""
    statements = [s for path in spec.files for s in _read(path, spec)]
    if not statements:
        raise PipelineError("the pipeline defines no dataset", path=spec.shown(spec.path))
    named = _names(statements, catalog)
    queries = {n: parse_statement_query(s, catalog) for n, s in named.items() if s.query}
    flows = _flows(statements, named, catalog)
    for flow_name, (flow, _) in flows.items():
        queries[flow_name] = parse_statement_query(flow, catalog)
    reads = _reads(named, queries, flows, catalog)
    order = _order(reads, {**named, **{n: f for n, (f, _) in flows.items()}})
    temporary = {n: s for n, s in named.items() if s.kind == TEMPORARY_VIEW}
    datasets = _datasets(order, named, queries, flows, temporary, catalog)
    return Pipeline(
        spec,
        catalog,
        datasets,
        [n for n in order if n in datasets],
        temporary,
    )


def _read(path: Path, spec: PipelineSpec) -> list[Statement]:
    """A file's statements: a SQL file's ``CREATE``s, a Python file's ``@dp`` datasets."""
    if path.suffix == ".py":
        return read_python(path, spec.shown(path), spec.database)
    return read_statements(path, spec.shown(path), spec.database)


def _names(statements: list[Statement], catalog: str) -> dict[str, Statement]:
    named: dict[str, Statement] = {}
    for statement in statements:
        if statement.kind == FLOW:
            continue
        name = _statement_name(statement, catalog)
        if name in named:
            first = named[name]
            raise statement.error(f"{name} is defined twice: here and at {first.path}:{first.line}")
        named[name] = statement
    return named


def _statement_name(statement: Statement, catalog: str) -> str:
    if statement.kind == CONTINUAL_TASK:
        return _continual(statement, catalog).name
    return qualify_name(statement.name, statement, catalog)


def _continual(statement: Statement, catalog: str) -> Any:
    try:
        return parse_continual_task(
            statement.text, default_namespace=statement.database, catalog_name=catalog
        )
    except QueryError as exc:
        raise statement.error(str(exc)) from None


def _flows(
    statements: list[Statement], named: dict[str, Statement], catalog: str
) -> dict[str, tuple[Statement, str]]:
    """Flows by the name of the table each writes (``<target>__<flow>`` when several share one)."""
    by_target: dict[str, list[Statement]] = {}
    for statement in statements:
        if statement.kind != FLOW:
            continue
        assert statement.target is not None
        target = qualify_name(statement.target, statement, catalog)
        declared = named.get(target)
        if declared is None or declared.kind != STREAMING_TABLE:
            raise statement.error(
                f"flow {statement.name} writes {target}, which no CREATE STREAMING TABLE defines"
            )
        by_target.setdefault(target, []).append(statement)
    result: dict[str, tuple[Statement, str]] = {}
    for target, flows in by_target.items():
        table = named[target]
        if len(flows) == 1 and table.query is None:
            result[target] = (flows[0], target)
            continue
        for flow in flows:
            name = f"{target}__{flow.name.split('.')[-1]}"
            if name in named or name in result:
                raise flow.error(f"flow {flow.name} into {target}: {name} is defined twice")
            result[name] = (flow, target)
    return result


def _reads(
    named: dict[str, Statement],
    queries: dict[str, Query],
    flows: dict[str, tuple[Statement, str]],
    catalog: str,
) -> dict[str, list[str]]:
    reads: dict[str, list[str]] = {}
    for name, statement in named.items():
        if statement.kind == CONTINUAL_TASK:
            task = _continual(statement, catalog)
            reads[name] = [task.input, *task.references]
        elif name in queries:
            reads[name] = list(queries[name].reads)
        else:
            reads[name] = []
    for name, (_, target) in flows.items():
        reads[name] = list(queries[name].reads)
        if name != target:  # the table is the union of its flows
            reads.setdefault(target, [])
            reads[target].append(name)
    return reads


def _order(reads: dict[str, list[str]], where: dict[str, Statement]) -> list[str]:
    """A topological order of the defined names; a cycle is refused with its path."""
    order: list[str] = []
    state: dict[str, int] = {}  # 1: on the path, 2: done

    def visit(name: str, path: list[str]) -> None:
        if state.get(name) == 2:
            return
        if state.get(name) == 1:
            cycle = [*path[path.index(name) :], name]
            places = ", ".join(f"{n} ({where[n].path}:{where[n].line})" for n in cycle[:-1])
            raise where[name].error(f"cycle: {' -> '.join(cycle)}; defined at {places}")
        state[name] = 1
        for upstream in reads.get(name, []):
            if upstream in reads:
                visit(upstream, [*path, name])
        state[name] = 2
        order.append(name)

    for name in reads:
        visit(name, [])
    return order


def _datasets(
    order: list[str],
    named: dict[str, Statement],
    queries: dict[str, Query],
    flows: dict[str, tuple[Statement, str]],
    temporary: dict[str, Statement],
    catalog: str,
) -> dict[str, Dataset]:
    inlined: dict[str, Any] = {}
    via: dict[str, set[str]] = {}
    datasets: dict[str, Dataset] = {}
    union: dict[str, list[str]] = {}
    for name, (_, target) in flows.items():
        if name != target:
            union.setdefault(target, []).append(name)
    for name in order:
        statement = flows[name][0] if name in flows else named[name]
        if statement.kind == CONTINUAL_TASK:
            task = _continual(statement, catalog)
            reads = (task.input, *task.references)
            datasets[name] = Dataset(
                name,
                CONTINUAL_TASK,
                statement,
                stream=task.input,
                reads=reads,
                columns=task.columns,
            )
            continue
        if name in union:
            datasets[name] = Dataset(
                name,
                MATERIALIZED_VIEW,
                statement,
                reads=tuple(union[name]),
                flows=tuple(union[name]),
            )
            continue
        if name not in queries:
            raise statement.error(f"streaming table {name} has no AS query and no flow writes it")
        query = queries[name]
        tree = inline(query.tree, inlined)
        used = {r for r in query.reads if r in temporary}
        names = sorted(used | {v for u in used for v in via.get(u, ())})
        if statement.kind == TEMPORARY_VIEW:
            inlined[name], via[name] = tree, set(names)
            continue
        datasets[name] = _dataset(name, statement, query, tree, names, temporary)
    return datasets


def _dataset(
    name: str,
    statement: Statement,
    query: Query,
    tree: Any,
    via: list[str],
    temporary: dict[str, Statement],
) -> Dataset:
    reads = tuple(sorted({t for t in _tables(tree)} - set(temporary)))
    if statement.kind == MATERIALIZED_VIEW:
        if query.streams:
            raise statement.error(
                "a materialized view reads tables, not STREAM(...): use a streaming table"
            )
        return Dataset(name, MATERIALIZED_VIEW, statement, tree=tree, reads=reads, via=tuple(via))
    if len(query.streams) != 1:
        raise statement.error(
            f"{statement.kind} {statement.name} must read exactly one STREAM(source), "
            f"reads {len(query.streams)}: a continual task processes one input's new rows"
        )
    return Dataset(
        name,
        CONTINUAL_TASK,
        statement,
        tree=tree,
        stream=query.streams[0],
        reads=reads,
        via=tuple(via),
    )


def _tables(tree: Any) -> Iterator[str]:
    """The tables a qualified tree reads (CTE references and table functions have no namespace)."""
    for table in tree.find_all(exp.Table):
        if table.name and table.db:
            yield f"{table.db}.{table.name}".lower()
