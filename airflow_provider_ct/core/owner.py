"""One owner per table: the view or task that maintains it, recorded on the table.

Why: two definitions pointed at one table (a copied DAG, a renamed group, a
typo in ``target=``) would each correct the other's rows on every tick, and
each tick would look successful. The first definition to tick a table records
its DAG and task group in the table's properties; a tick of any other
definition is refused with both named. Moving a view to another DAG or group
is an explicit step: unset the two properties (docs/views.md, "Moving a view").
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING

from airflow_provider_ct.core.keys import TableKeys
from airflow_provider_ct.exceptions import OwnershipError

if TYPE_CHECKING:
    from pyiceberg.table import Table

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Owner:
    """A definition's identity: its DAG and task group (or task, outside a group)."""

    dag_id: str
    group: str

    def __str__(self) -> str:
        return f"DAG {self.dag_id!r}, group {self.group!r}"

    @classmethod
    def of(cls, table: Table) -> Owner | None:
        """The owner recorded on ``table``, if any."""
        props = table.metadata.properties
        dag_id, group = props.get(TableKeys.OWNER_DAG), props.get(TableKeys.OWNER_GROUP)
        return None if dag_id is None else cls(dag_id, group or "")


def claim(table: Table, owner: Owner, *, record: bool = True) -> Table:
    """Check that ``owner`` maintains ``table``, recording it first if nobody does yet.

    ``record=False`` (read-only mode) only checks: an unowned table stays so.

    The record is a metadata-only commit (no snapshot: compare-and-append
    of the table's writers is unaffected); a concurrent claim by another
    definition is caught by reading the record back.
    """
    _refuse_collection(table, owner)
    recorded = Owner.of(table)
    if recorded is None and not record:
        return table
    if recorded is None:
        log.info("%s is now maintained by %s", ".".join(table.name()), owner)
        props = {TableKeys.OWNER_DAG: owner.dag_id, TableKeys.OWNER_GROUP: owner.group}
        table.transaction().set_properties(props).commit_transaction()
        table = table.refresh()
        recorded = Owner.of(table)
    if recorded != owner:
        name = ".".join(table.name())
        raise OwnershipError(
            f"table {name} is maintained by {recorded}; this definition is {owner}. Two "
            f"definitions of one table would correct each other's rows on every tick, so "
            f"nothing was written. To move the table's definition here, unset its properties "
            f"{TableKeys.OWNER_DAG!r} and {TableKeys.OWNER_GROUP!r} (see docs/views.md)"
        )
    return table


def _refuse_collection(table: Table, owner: Owner) -> None:
    """A registered collection belongs to its writers: a view's corrections would undo theirs."""
    kind = table.metadata.properties.get(TableKeys.COLLECTION_KIND)
    if kind is not None:
        raise OwnershipError(
            f"table {'.'.join(table.name())} is a registered {kind} collection, written by its "
            f"collection writers; {owner} cannot maintain it as well, so nothing was written. "
            "Point the definition at another table"
        )
