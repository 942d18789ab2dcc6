"""Incremental corrections: a view's change computed from its inputs' changes.

Given a :class:`~airflow_provider_ct.ivm.plan.planner.Plan` and the inputs bound
to temp views ``new``, ``old``, ``plus`` (rows the input gained) and
``minus`` (rows it lost) between the snapshots the target's last batch
pinned and now (:mod:`.input_changes`), we evaluate the plan's *terms* (:mod:`.terms`): the
query's blocks over those bindings, each with a sign. Their signed sum is
the view's change (the delta rules, see the planner). Then:

* ``linear``: the positive rows are inserted, the negative ones retracted
  from the target's head (located by fingerprint, lowest ``(_file, _pos)``
  first), after cancelling pairs through the same fingerprint aggregation as
  the full correction;
* ``group``: the grouping keys of the terms' rows are the affected groups;
  the query restricted to them (over the new inputs) is compared with the
  target's rows of those groups by the full correction's fingerprint diff.

Rows are compared as multisets everywhere, so duplicates and NULLs behave
as in the full correction.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from airflow_provider_ct.ivm.plan.decision import Fallback
from airflow_provider_ct.ivm.plan.planner import GROUP, Block, KeyRange, Plan
from airflow_provider_ct.ivm.plan.read_estimate import Restriction
from airflow_provider_ct.ivm.plan.rewrites import (
    DAY_BOUND_TYPES,
    InlineKeys,
    bind_tables,
    day_ranges,
    restrict_columns_to_keys,
    restrict_to_keys,
)
from airflow_provider_ct.ivm.plan.sizes import ReadCheck
from airflow_provider_ct.spark.diff import compute_correction
from airflow_provider_ct.spark.fingerprints import Correction
from airflow_provider_ct.spark.ivm.affected_keys import (
    affected_rows,
    inline_from_arrow,
    inline_keys,
    keys_from_changes,
    keys_from_terms,
)
from airflow_provider_ct.spark.ivm.bindings import NEW
from airflow_provider_ct.spark.ivm.days import (
    Days,
    arrow_days,
    days_report,
    only_days,
    restrict_days,
)
from airflow_provider_ct.spark.ivm.input_changes import Bindings
from airflow_provider_ct.spark.ivm.terms import register_restrictions, terms
from airflow_provider_ct.spark.ivm.top_k import top_k_correction

if TYPE_CHECKING:
    from pyspark.sql import DataFrame, SparkSession

log = logging.getLogger(__name__)

KEYS_VIEW = "__ct_affected_keys"


def _signed_frames(
    parts: list[tuple[int, DataFrame]], empty: DataFrame
) -> tuple[DataFrame, DataFrame]:
    plus = [f for s, f in parts if s > 0]
    minus = [f for s, f in parts if s < 0]

    def union(frames: list[DataFrame]) -> DataFrame:
        out = empty
        for frame in frames:
            out = out.union(frame)
        return out

    return union(plus), union(minus)


@dataclass(frozen=True)
class Delta:
    """One incremental tick's query, inputs and target columns."""

    spark: SparkSession
    plan: Plan
    bindings: Bindings
    catalog_name: str
    columns: list[str]
    #: Diff small sides on the driver (see ``.driver_diff``).
    on_driver: bool = True
    #: Prices the restricted reads (input -> restrictions) before they run;
    #: returns a ``not cheaper`` fallback when the full correction would cost
    #: less (``refresh="auto"`` only), and the tick stops there.
    check_reads: ReadCheck | None = None

    def frame(self, block: Block, views: dict[str, str], names: list[str], shape: Any) -> DataFrame:
        """``block`` over ``views``, reshaped by ``shape`` (a tree -> tree function)."""
        tree = shape(bind_tables(block.tree, views, self.catalog_name))
        return self.spark.sql(tree.sql(dialect="spark")).toDF(*names)


def _same(tree: Any) -> Any:
    return tree


def _signed_change(delta: Delta, persisted: DataFrame) -> tuple[DataFrame, DataFrame]:
    """The rows the blocks gained and lost: the plan's terms, summed by sign."""
    columns = delta.columns
    empty = persisted.select(*[f"`{c}`" for c in columns]).limit(0)
    parts = [
        (term.sign, delta.frame(term.block, term.views, columns, _same))
        for term in terms(delta.plan, delta.bindings)
    ]
    return _signed_frames(parts, empty)


def _linear(delta: Delta, persisted: DataFrame) -> Correction:
    """The view's change as inserts and located retractions (strategy ``linear``)."""
    columns = delta.columns
    plus, minus = _signed_change(delta, persisted)
    plus = plus.cache()  # read by the diff and again for the rows to insert
    return _correct_releasing(
        lambda: compute_correction(
            plus, minus, columns, located=persisted, on_driver=delta.on_driver
        ),
        plus,
    )


def _top(delta: Delta, persisted: DataFrame) -> Correction | Fallback:
    """The view's rows with the rows' change applied, cut to the top (strategy ``top``)."""
    assert delta.plan.top is not None
    plus, minus = _signed_change(delta, persisted)
    return top_k_correction(
        plus, minus, persisted, delta.columns, delta.plan.top, on_driver=delta.on_driver
    )


def _group(delta: Delta, persisted: DataFrame) -> Correction | Fallback:
    """Recompute the groups whose keys occur in the change; correct only their rows."""
    whole_days = _days_from_changes(delta)
    if whole_days is not None:
        return _whole_days(delta, persisted, whole_days)
    plan, columns = delta.plan, delta.columns
    block = plan.blocks[0]
    new_views = {name: names[NEW] for name, names in delta.bindings.views.items()}
    if delta.check_reads is not None and not (plan.key_columns or plan.key_ranges):
        costly = delta.check_reads({})  # no restriction reaches the scan: inputs read whole
        if costly is not None:
            return costly
    # Days need every key: a key read from the changes alone spans all days.
    # Subqueries' changes (keyed, or in brackets) move groups no key column of the block
    # tells: the terms do.
    direct = not (plan.key_ranges or delta.bindings.keyed or delta.bindings.subqueries)
    found = (keys_from_changes(delta) if direct else None) or keys_from_terms(delta)
    keys = found.frame.distinct().cache()
    keys.createOrReplaceTempView(KEYS_VIEW)
    if len(found.key_sql) != 1:
        inline = None
    elif found.on_driver is not None:
        inline = inline_from_arrow(found.on_driver, keys.schema.fields[0].dataType)
    else:
        inline = inline_keys(keys)
    days = _affected_days(delta, keys, inline)
    if delta.check_reads is not None:
        costly = delta.check_reads(_restrictions(found.members, inline, days))
        if costly is not None:
            keys.unpersist()  # a warm driver outlives the job: free what this tick cached
            return costly

    def restrict(tree: Any) -> Any:
        tree = restrict_days(restrict_to_keys(tree, found.key_sql, KEYS_VIEW, inline), days)
        return restrict_columns_to_keys(tree, list(found.also), KEYS_VIEW, inline)

    # Cached: the correction reads the affected groups twice (the diff, then
    # the rows to insert), and they are few; recomputing means another scan.
    desired = delta.frame(block, new_views, columns, restrict).cache()
    # Cached too: the diff reads the target's affected rows, and the
    # retractions are picked from them again (else a second target scan).
    affected = affected_rows(persisted, columns, found, keys, inline)
    affected = only_days(affected, columns, plan, days).cache()
    correction = _correct_releasing(
        lambda: compute_correction(desired, affected, columns, on_driver=delta.on_driver),
        desired,
        affected,
        keys,
    )
    if plan.key_ranges:
        correction.notes["restricted_days"] = days_report(days)
        if not days:  # no day could bound a read: what ran is the plain group strategy
            correction.notes["strategy"] = GROUP
    return correction


def _restrictions(
    members: tuple[tuple[str, str], ...], inline: InlineKeys | None, days: Days
) -> dict[str, list[Restriction]]:
    """Per input, the restrictions of its read that reach Iceberg's scan planning.

    Inlined keys of a column (and of the columns equal to it) and day ranges
    do; a keys view joined in (many keys, several keys) does not.
    """
    out: dict[str, list[Restriction]] = {}
    if inline is not None:
        for name, column in members:
            restriction = Restriction(column, inline.values, has_null=inline.has_null)
            out.setdefault(name, []).append(restriction)
    for (key_range, _), values in days.items():
        ranges = tuple(day_ranges(values.values))
        restriction = Restriction(key_range.column, has_null=values.has_null, days=ranges)
        out.setdefault(key_range.input, []).append(restriction)
    return out


def _whole_days(delta: Delta, persisted: DataFrame, days: Days) -> Correction | Fallback:
    """Recompute every group of the changed days: no keys to find, no Spark job to find them.

    When the input holding the day column is the only one that changed, a
    group can change only if one of its rows did, and that row's day is
    the group's day: the changed rows' days bound the affected groups. All
    groups of those days are recomputed (a superset, each group whole), and
    the target's rows of those days are the other side of the diff.
    """
    plan, columns = delta.plan, delta.columns
    if delta.check_reads is not None:
        costly = delta.check_reads(_restrictions((), None, days))
        if costly is not None:
            return costly

    new_views = {name: names[NEW] for name, names in delta.bindings.views.items()}
    desired = delta.frame(
        plan.blocks[0], new_views, columns, lambda tree: restrict_days(tree, days)
    )
    affected = only_days(persisted, columns, plan, days)
    if not delta.on_driver:  # Spark's diff reads each side twice; the driver's pulls once
        desired, affected = desired.cache(), affected.cache()
    correction = _correct_releasing(
        lambda: compute_correction(desired, affected, columns, on_driver=delta.on_driver),
        desired,
        affected,
    )
    correction.notes["restricted_days"] = days_report(days)
    correction.notes["affected_keys"] = "the changed rows' days, found on the driver"
    return correction


def _days_from_changes(delta: Delta) -> Days | None:
    """The changed rows' days, read on the driver, when they bound every affected group.

    Only when the one input that changed holds the day key's column (a
    change of another input, joined in, can move a group of any day) and is
    not the optional side of a ``LEFT JOIN`` (losing its last match moves
    preserved rows into the NULL day, which no changed row names), its
    change is on the driver as Arrow, and the days are few enough to inline.
    The day is the cast's: a timestamp's date in the Spark session's time
    zone, a ``TIMESTAMP_NTZ``'s own date.
    """
    changed = delta.bindings.changed
    join = delta.plan.blocks[0].left_join
    for key_range in delta.plan.key_ranges:
        change = delta.bindings.changes.get(key_range.input)
        if changed != {key_range.input} or change is None or change.arrow is None:
            continue
        if join is not None and join.optional == key_range.input:
            continue  # a changed optional row also moves preserved rows to or from the NULL day
        column_type = _column_type(delta, key_range)
        if column_type not in DAY_BOUND_TYPES:
            continue
        zone = delta.spark.conf.get("spark.sql.session.timeZone") or "UTC"
        values = arrow_days(change.arrow, key_range.column, zone, column_type == "timestamp")
        if values is not None:
            return {(key_range, column_type): values}
    return None


def _column_type(delta: Delta, key_range: KeyRange) -> str | None:
    """The Spark type (``simpleString``) of a day key's column in its input, if it has one."""
    schema = delta.spark.table(delta.bindings.views[key_range.input][NEW]).schema
    types = [f.dataType.simpleString() for f in schema.fields if f.name.lower() == key_range.column]
    return types[0] if len(types) == 1 else None


def _affected_days(delta: Delta, keys: DataFrame, inline: InlineKeys | None) -> Days:
    """The affected days of each day key whose column a range can bound (few enough to inline).

    Read from the keys already computed (inlined literals, or one small job
    over the cached keys); a column of another type (a string cast to a
    date) or too many days leaves the key to the plain restriction.
    """
    out: Days = {}
    for key_range in delta.plan.key_ranges:
        column_type = _column_type(delta, key_range)
        if column_type not in DAY_BOUND_TYPES:
            log.info("day key %s: column type %s cannot be bounded", key_range.column, column_type)
            continue
        if inline is not None and len(delta.plan.key_sql) == 1:
            values: InlineKeys | None = inline
        else:
            values = inline_keys(keys.select(f"__ct_k{key_range.index}").distinct())
        if values is not None:
            out[(key_range, str(column_type))] = values
    return out


def _correct_releasing(compute: Any, *cached: DataFrame) -> Correction:
    """``compute()``, whose ``release`` also unpersists ``cached`` (after staging).

    A failed computation unpersists them at once: a warm driver outlives the job.
    """
    try:
        correction: Correction = compute()
    except Exception:
        for frame in cached:
            frame.unpersist()
        raise
    release = correction.release

    def release_all() -> None:
        if release is not None:
            release()
        for frame in cached:
            frame.unpersist()

    correction.release = release_all
    return correction


def incremental_correction(
    spark: SparkSession,
    plan: Plan,
    bindings: Bindings,
    catalog_name: str,
    persisted: DataFrame,
    columns: list[str],
    *,
    on_driver: bool = True,
    check_reads: ReadCheck | None = None,
) -> Correction | Fallback:
    """The correction of one incremental tick, by the plan's strategy.

    :param persisted: the target's head with ``_file`` and ``_pos``.
    :param on_driver: diff small sides on the driver (see ``.driver_diff``).
    :param check_reads: see :attr:`Delta.check_reads`.
    """
    register_restrictions(spark, plan, bindings)
    delta = Delta(spark, plan, bindings, catalog_name, columns, on_driver, check_reads)
    try:
        if plan.grouped:
            return _group(delta, persisted)
        if plan.top is not None:
            return _top(delta, persisted)
        return _linear(delta, persisted)
    finally:
        bindings.release_arrow()
