"""Incremental view maintenance: what a view's tick can compute from its inputs' changes.

The floor between the frontier and commit core (:mod:`airflow_provider_ct.core`)
and the Spark jobs (:mod:`airflow_provider_ct.spark`). Nothing here imports
Airflow or PySpark; the Spark side of incremental maintenance is
:mod:`airflow_provider_ct.spark.ivm`. Four rooms, each importing only the
ones listed before it:

* :mod:`.changes`: which rows a table's snapshots inserted and deleted
  between two snapshots, from metadata and the touched files only;
* :mod:`.plan`: the query's shape (strategies and their rewrites), the
  target's history, the refresh rules, and the one decision of a tick
  (:mod:`.plan.decision`);
* :mod:`.state`: what a view keeps beside its target (in-place aggregate
  state: its arithmetic and its table);
* :mod:`.driver`: delta rules evaluated on the driver with Arrow (filters,
  expressions, keyed fetches, joins of a change, in-place aggregates).

``docs/ivm.md`` walks a tick's incremental path in order.
"""
