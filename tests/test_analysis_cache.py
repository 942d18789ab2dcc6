"""Kept analyses: asked once per key; a new schema, table or type setting asks again."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from airflow_provider_ct.spark.ivm import analysis_cache as ac


class _Conf:
    def __init__(self, values: dict[str, str]) -> None:
        self.values = values

    def get(self, key: str, default: Any = None) -> Any:
        return self.values.get(key, default)


def _table(uuid: str, schemas: dict[int, int]) -> Any:
    """A stand-in for PyIceberg's table: snapshot id -> schema id."""
    snapshots = {s: SimpleNamespace(schema_id=schema) for s, schema in schemas.items()}
    metadata = SimpleNamespace(
        table_uuid=uuid, current_schema_id=max(schemas.values()), snapshot_by_id=snapshots.get
    )
    return SimpleNamespace(metadata=metadata)


def test_one_analysis_per_key_and_what() -> None:
    spark = SimpleNamespace(conf=_Conf({"spark.sql.ansi.enabled": "true"}), version="4.0.1")
    table = _table("u1", {1: 0, 2: 0, 3: 1})
    asked: list[str] = []

    def ask(label: str) -> Any:
        def compute() -> str:
            asked.append(label)
            return label

        return compute

    key = ac.analysis_key(spark, "SELECT 1", {"s.a": table}, {"s.a": 1})
    assert ac.analyzed(key, "rows", ask("rows")) == "rows"
    assert ac.analyzed(key, "rows", ask("again")) == "rows"  # kept
    assert ac.analyzed(key, "nodes", ask("nodes")) == "nodes"
    same_schema = ac.analysis_key(spark, "SELECT 1", {"s.a": table}, {"s.a": 2})
    assert same_schema == key  # a new snapshot of the same schema: the same answers
    assert ac.analysis_key(spark, "SELECT 1", {"s.a": table}, {"s.a": 3}) != key
    assert ac.analysis_key(spark, "SELECT 1", {"s.a": _table("u2", {1: 0})}, {"s.a": 1}) != key
    assert ac.analysis_key(spark, "SELECT 2", {"s.a": table}, {"s.a": 1}) != key
    other = SimpleNamespace(conf=_Conf({"spark.sql.ansi.enabled": "false"}), version="4.0.1")
    assert ac.analysis_key(other, "SELECT 1", {"s.a": table}, {"s.a": 1}) != key
    assert ac.analyzed(None, "rows", ask("unkept")) == "unkept"
    assert asked == ["rows", "nodes", "unkept"]
