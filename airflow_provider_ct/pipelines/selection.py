"""Which datasets a run ticks, and which it refreshes in full: SDP's refresh selection.

SDP's ``run --refresh a,b``, ``--full-refresh a,b`` and ``--full-refresh-all``
are the run parameters ``refresh``, ``full_refresh`` and
``full_refresh_all``. Without any, every dataset ticks (incrementally where
it can). With a selection, the named datasets tick, **and the datasets
they read** (incrementally): a tick at time ``T`` reads its inputs as they
were at ``T``, so an input that skipped the run would never have sealed
``T`` and the named dataset would wait for it forever. Datasets downstream
of the selection skip the run and keep their snapshots. (Decision,
docs/pipelines.md: SDP refreshes only the named datasets, over whatever
its inputs hold; a consistent cut needs their inputs at the same time.)

A streaming table (a continual task) refreshed in full is truncated and
processes its input's contents at the run's time once, as ``SNAPSHOT =
true`` does at a task's first tick (SDP's ``--full-refresh`` of a streaming
table); its readers tick from that content on their next run.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from airflow_provider_ct.exceptions import PipelineError
from airflow_provider_ct.pipelines.graph import Pipeline

#: The run parameters and their defaults (the Trigger dialog's form).
PARAMS: dict[str, Any] = {"refresh": [], "full_refresh": [], "full_refresh_all": False}


@dataclass(frozen=True)
class Selection:
    """What one run does to each dataset."""

    #: Datasets that tick (None: all).
    ticks: frozenset[str] | None
    #: Datasets whose tick is the full correction.
    full: frozenset[str]

    def action(self, name: str) -> str:
        """``full``, ``tick`` or ``skip``."""
        if name in self.full:
            return "full"
        return "tick" if self.ticks is None or name in self.ticks else "skip"


def _names(pipeline: Pipeline, value: Any, param: str) -> set[str]:
    if value in (None, "", []):
        return set()
    items = value.split(",") if isinstance(value, str) else value
    if not isinstance(items, list | tuple):
        raise PipelineError(f"run parameter {param!r} must be a list of dataset names")
    chosen = set()
    for item in items:
        name = _dataset_name(pipeline, str(item).strip())
        if name is None:
            known = ", ".join(pipeline.order)
            raise PipelineError(f"run parameter {param!r}: no dataset {item!r} (datasets: {known})")
        chosen.add(name)
    return chosen


def _dataset_name(pipeline: Pipeline, text: str) -> str | None:
    lowered = text.lower()
    parts = lowered.split(".")
    if len(parts) == 3 and parts[0] == pipeline.catalog.lower():
        lowered = ".".join(parts[1:])
    if lowered in pipeline.datasets:
        return lowered
    matches = [n for n in pipeline.datasets if n.split(".")[-1] == lowered]
    return matches[0] if len(matches) == 1 else None


def _upstream_closure(pipeline: Pipeline, names: set[str]) -> set[str]:
    found, pending = set(names), list(names)
    while pending:
        for upstream in pipeline.upstream(pending.pop()):
            if upstream not in found:
                found.add(upstream)
                pending.append(upstream)
    return found


def select(pipeline: Pipeline, params: Mapping[str, Any]) -> Selection:
    """The run's selection from its params; unknown names refused."""
    refresh = _names(pipeline, params.get("refresh"), "refresh")
    if params.get("full_refresh_all"):
        return Selection(None, frozenset(pipeline.datasets))
    full = _names(pipeline, params.get("full_refresh"), "full_refresh")
    if not refresh and not full:
        return Selection(None, frozenset())
    return Selection(frozenset(_upstream_closure(pipeline, refresh | full)), frozenset(full))
