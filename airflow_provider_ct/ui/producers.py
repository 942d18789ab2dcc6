"""Which DAG produces each table: asked of Airflow's metadata database, not of the catalog.

A view's or continual task's append task declares the table's Asset
(``views.view_asset``: ``iceberg://<catalog>/<namespace>/<table>``) as its
outlet, and Airflow records every declared outlet in
``task_outlet_asset_reference`` when it parses the DAG. That record is what
this module reads: it names the DAG that will write the table next, even
before its first run, and it follows DAG edits without anything written
into the table. Tables no parsed DAG declares (a collection written by a
plain task) fall back to the DAG of the newest asset event for their URI,
if any. A summary key written by each append was the alternative; it would
name only the DAG of the last write, could not be corrected when a DAG is
renamed, and would put Airflow's names into tables other engines read.

The page runs inside Airflow's API server, which has the metadata database;
a failure here leaves the column empty and is reported as a note.
"""

from __future__ import annotations

import logging
from collections.abc import Collection
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from sqlalchemy.orm import Session

log = logging.getLogger(__name__)


def producing_dags(uris: Collection[str]) -> dict[str, list[str]]:
    """DAG ids per asset URI: the DAGs declaring it as an outlet, else its newest event's DAG.

    URIs no DAG is known for are absent from the answer.
    """
    if not uris:
        return {}
    from airflow.utils.session import create_session

    with create_session() as session:
        found = _declared(session, uris)
        missing = [u for u in uris if u not in found]
        if missing:
            found.update(_from_events(session, missing))
    return found


def _declared(session: Session, uris: Collection[str]) -> dict[str, list[str]]:
    from airflow.models.asset import AssetModel, TaskOutletAssetReference
    from sqlalchemy import select

    query = (
        select(AssetModel.uri, TaskOutletAssetReference.dag_id)
        .join(TaskOutletAssetReference, TaskOutletAssetReference.asset_id == AssetModel.id)
        .where(AssetModel.uri.in_(list(uris)))
        .distinct()
    )
    found: dict[str, list[str]] = {}
    for uri, dag_id in session.execute(query):
        found.setdefault(uri, []).append(dag_id)
    return {uri: sorted(dags) for uri, dags in found.items()}


def _from_events(session: Session, uris: Collection[str]) -> dict[str, list[str]]:
    from airflow.models.asset import AssetEvent, AssetModel
    from sqlalchemy import select

    query = (
        select(AssetModel.uri, AssetEvent.source_dag_id)
        .join(AssetEvent, AssetEvent.asset_id == AssetModel.id)
        .where(AssetModel.uri.in_(list(uris)), AssetEvent.source_dag_id.is_not(None))
        .order_by(AssetEvent.timestamp.desc())
    )
    found: dict[str, list[str]] = {}
    for uri, dag_id in session.execute(query):
        found.setdefault(uri, [str(dag_id)])  # the newest event wins
    return found
