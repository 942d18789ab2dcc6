"""One ``SELECT`` of a planned query: the tables it reads and how its joins are maintained.

Its own module so that the strategies' modules (the steps, the terms,
the outer joins' rules) name a block without importing the planner's
decisions; :mod:`.planner` builds them.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from airflow_provider_ct.ivm.plan.left_join import LeftJoin
from airflow_provider_ct.ivm.plan.outer_joins import OuterJoins
from airflow_provider_ct.ivm.plan.reads import occurrence_keys


@dataclass(frozen=True)
class Block:
    """One ``SELECT`` of the query (a leaf of its ``UNION ALL``)."""

    #: The block's tree; tables still name the inputs.
    tree: Any
    #: The inputs it reads, normalized, one per table of ``FROM`` and the joins in
    #: order: a table read twice (``nation n1, nation n2``) is there twice.
    inputs: tuple[str, ...]
    left_join: LeftJoin | None = None
    #: Tables read only inside the block's subqueries (``WHERE x IN (SELECT ...)``,
    #: ``EXISTS``, a scalar subquery), normalized: fixed filters while they do not
    #: change (:func:`~.subqueries.fixed_subquery_tables`).
    fixed: tuple[str, ...] = ()
    #: Of ``fixed``, the tables read only by semi- and anti-join conjuncts of ``WHERE``
    #: (:func:`~.subqueries.semi_join_query`), which an in-place tick maintains on the driver.
    semi: tuple[str, ...] = ()
    #: Whether every subquery may be tied to the block by one key (:mod:`.keyed`, placed
    #: when a tick runs): a change of their tables then moves only the keys it holds.
    keyed: bool = False
    #: Of ``fixed``, the tables read only by uncorrelated scalar subqueries the block
    #: compares its rows with (:mod:`.parameters`): a value of each snapshot, whose
    #: change an in-place tick maintains on the driver (the rows it flips).
    params: tuple[str, ...] = ()
    #: Its joins when they hold outer joins other than :attr:`left_join`'s one, with the
    #: rule each read's change follows (:mod:`.outer_joins`).
    outer: OuterJoins | None = None

    @property
    def outer_joined(self) -> bool:
        """Whether a changed row may move other rows (null-extended ones) of the block."""
        return self.left_join is not None or self.outer is not None

    @property
    def occurrences(self) -> tuple[str, ...]:
        """One key per table read, in order: :func:`~.reads.occurrence_key` of each input."""
        return occurrence_keys(self.inputs)

    @property
    def repeated(self) -> frozenset[str]:
        """The inputs the block reads more than once."""
        return frozenset(n for n in self.inputs if self.inputs.count(n) > 1)
