"""The package's floors, checked on every import statement (function-level ones included).

``docs/architecture.md`` explains the floors; this test is what keeps them:
a lower floor never imports a higher one, and the floors that run inside
Spark drivers and the warm engine (``core``, ``spark``, ``engine``,
``collections``) never import Airflow.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parent.parent / "airflow_provider_ct"
AIRFLOW = "airflow"

#: What each part of the package may import besides itself and the standard
#: and third-party libraries. ``__init__`` is the package root, which only
#: re-exports lazily and imports nothing itself.
ALLOWED: dict[str, frozenset[str]] = {
    "exceptions": frozenset(),
    "core": frozenset({"exceptions"}),
    "ivm": frozenset({"exceptions", "core"}),
    "spark": frozenset({"exceptions", "core", "ivm"}),
    "collections": frozenset({"exceptions", "core"}),
    "engine": frozenset({"__init__", "exceptions", "core", "spark"}),
    "hooks": frozenset({AIRFLOW, "exceptions", "core", "spark", "engine"}),
    "assets": frozenset({AIRFLOW, "core"}),
    "lineage": frozenset({AIRFLOW, "core"}),
    "triggers": frozenset({AIRFLOW, "exceptions", "core", "hooks"}),
    "sensors": frozenset({AIRFLOW, "exceptions", "core", "hooks", "triggers", "operators._common"}),
    "operators": frozenset(
        {AIRFLOW, "exceptions", "core", "ivm", "spark", "engine", "collections", "hooks"}
        | {"assets", "lineage", "triggers"}
    ),
    "factory_settings": frozenset({"exceptions", "hooks"}),
    "_groups": frozenset({AIRFLOW, "assets", "factory_settings", "sensors", "operators"}),
    "views": frozenset(
        {
            AIRFLOW,
            "core",
            "ivm",
            "assets",
            "hooks",
            "operators",
            "sensors",
            "_groups",
            "factory_settings",
        }
    ),
    "continual": frozenset(
        {AIRFLOW, "core", "assets", "hooks", "operators", "sensors", "_groups", "factory_settings"}
    ),
    "tick_dag": frozenset({AIRFLOW, "core", "collections", "hooks", "operators"}),
    # A pipeline folder: reading, parsing and the graph import no Airflow; the
    # modules that load it against the catalog and build its DAG sit on the factories.
    "pipelines": frozenset({"exceptions", "core"}),
    "pipelines.load": frozenset(
        {AIRFLOW, "exceptions", "core", "hooks", "operators._common", "pipelines"}
    ),
    "pipelines.constant_task": frozenset(
        {AIRFLOW, "exceptions", "core", "hooks", "operators._common", "pipelines"}
    ),
    "pipelines.dag": frozenset(
        {AIRFLOW, "exceptions", "views", "continual", "pipelines", "pipelines.load"}
        | {"pipelines.constant_task"}
    ),
    # The dry run's Spark analysis: the tick's own checks (spark.definition_check).
    "pipelines.spark_check": frozenset(
        {"exceptions", "core", "spark", "pipelines", "pipelines.load"}
    ),
    "pipelines.cli": frozenset(
        {AIRFLOW, "exceptions", "views", "pipelines", "pipelines.load", "pipelines.dag"}
        | {"hooks", "spark", "pipelines.spark_check"}
    ),
    "ui": frozenset({AIRFLOW, "exceptions", "core", "collections", "hooks"}),
    "get_provider_info": frozenset({"__init__"}),
    "__init__": frozenset(),
}
#: Floors that run where Airflow is not installed (Spark drivers, the warm engine).
WITHOUT_AIRFLOW = ("exceptions", "core", "ivm", "spark", "engine", "collections", "pipelines")
#: The rooms of incremental maintenance (``ivm/``), each importing only the ones
#: listed before it: changes are read without a plan, the plan decides without
#: state, the state's arithmetic knows no driver evaluation.
IVM_ROOMS: dict[str, frozenset[str]] = {
    "changes": frozenset(),
    "plan": frozenset({"changes"}),
    "state": frozenset({"changes", "plan"}),
    "driver": frozenset({"changes", "plan", "state"}),
}
#: The Spark job's own modules: incremental maintenance's Spark side (``spark/ivm``)
#: computes for a job, it never runs one.
SPARK_JOB_MODULES = ("write_job", "continual_job", "job_main", "jobs", "stage_correction")
#: Parts of the package where PySpark may be imported (only the Spark floor, and
#: the warm engine that hosts it): ``ivm`` plans and evaluates without a JVM.
WITHOUT_PYSPARK = ("exceptions", "core", "ivm", "collections", "pipelines")


def _part(module: str) -> str:
    """``airflow_provider_ct.core.staging`` -> ``core``; the root -> ``__init__``.

    A module with a floor of its own (``pipelines.dag``) is its own part.
    """
    parts = module.split(".")
    if len(parts) > 2 and ".".join(parts[1:3]) in ALLOWED:
        return ".".join(parts[1:3])
    return parts[1] if len(parts) > 1 else "__init__"


def _imports(path: Path) -> Iterator[tuple[int, str]]:
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from ((node.lineno, alias.name) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            yield node.lineno, node.module


def _target(name: str) -> str | None:
    """The part an import names (``airflow`` for Airflow), or None for other libraries."""
    top = name.split(".")[0]
    if top == AIRFLOW:
        return AIRFLOW
    return _part(name) if top == PACKAGE.name else None


def _violations(package: Path = PACKAGE) -> list[str]:
    found = []
    for path in sorted(package.rglob("*.py")):
        module = ".".join(path.relative_to(package.parent).with_suffix("").parts)
        part = _part(module.removesuffix(".__init__"))
        allowed = ALLOWED.get(part)
        if allowed is None:
            found.append(f"{module}: part {part!r} has no floor in ALLOWED")
            continue
        for line, name in _imports(path):
            target = _target(name)
            submodule = ".".join(name.split(".")[1:3])  # e.g. operators._common
            if target is None or target == part or target in allowed or submodule in allowed:
                continue
            found.append(f"{module}:{line} imports {name} ({part} may not import {target})")
    return found


def test_every_import_respects_the_floors() -> None:
    assert _violations() == []


def _room_violations(package: Path = PACKAGE) -> list[str]:
    """Imports across the rooms of ``ivm/`` against :data:`IVM_ROOMS`, and from ``spark/ivm``
    into the Spark job's modules."""
    found = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(package).with_suffix("").parts
        if parts[0] == "ivm" and len(parts) > 2:
            room, allowed = parts[1], IVM_ROOMS.get(parts[1])
            if allowed is None:
                found.append(f"{path.name}: room {room!r} of ivm has no place in IVM_ROOMS")
                continue
            for line, name in _imports(path):
                target = name.split(".")
                if target[:2] == [PACKAGE.name, "ivm"] and len(target) > 3:
                    other = target[2]
                    if other != room and other not in allowed:
                        found.append(f"ivm.{room}/{path.name}:{line} imports {name}")
        elif parts[:2] == ("spark", "ivm"):
            for line, name in _imports(path):
                target = name.split(".")
                if target[:2] == [PACKAGE.name, "spark"] and target[2:3] != ["ivm"]:  # noqa: SIM102
                    if len(target) > 2 and target[2] in SPARK_JOB_MODULES:
                        found.append(f"spark.ivm/{path.name}:{line} imports {name}")
    return found


def test_the_rooms_of_incremental_maintenance_import_downwards() -> None:
    assert _room_violations() == []


@pytest.mark.parametrize("part", WITHOUT_PYSPARK)
def test_floors_below_spark_import_no_pyspark(part: str) -> None:
    """Planning and the driver's evaluation run without a JVM (mint, quiet checks, explain)."""
    paths = [PACKAGE / f"{part}.py"] if (PACKAGE / f"{part}.py").exists() else []
    paths += sorted((PACKAGE / part).rglob("*.py")) if (PACKAGE / part).is_dir() else []
    assert paths
    found = [
        f"{path.relative_to(PACKAGE)}:{line}"
        for path in paths
        for line, name in _imports(path)
        if name.split(".")[0] == "pyspark"
    ]
    assert found == []


@pytest.mark.parametrize("part", WITHOUT_AIRFLOW)
def test_floors_that_run_in_spark_import_no_airflow(part: str) -> None:
    assert AIRFLOW not in ALLOWED[part]


def test_the_check_sees_late_and_upward_imports(tmp_path: Path) -> None:
    """An import inside a function is a dependency too; so is Airflow in ``core``."""
    core = tmp_path / PACKAGE.name / "core"
    core.mkdir(parents=True)
    (core / "bad.py").write_text(
        "import airflow.sdk\n\ndef f():\n    from airflow_provider_ct.operators.write import X\n"
    )
    (core / "good.py").write_text("from airflow_provider_ct.core.frontier import Frontier\n")
    assert _violations(tmp_path / PACKAGE.name) == [
        "airflow_provider_ct.core.bad:1 imports airflow.sdk (core may not import airflow)",
        "airflow_provider_ct.core.bad:4 imports airflow_provider_ct.operators.write "
        "(core may not import operators)",
    ]


def test_the_room_check_sees_upward_imports(tmp_path: Path) -> None:
    """A change reader that asks the planner, or Spark's delta rules that run a job, is caught."""
    changes = tmp_path / PACKAGE.name / "ivm" / "changes"
    spark_ivm = tmp_path / PACKAGE.name / "spark" / "ivm"
    changes.mkdir(parents=True)
    spark_ivm.mkdir(parents=True)
    (changes / "bad.py").write_text("from airflow_provider_ct.ivm.plan.planner import Plan\n")
    (changes / "good.py").write_text("from airflow_provider_ct.ivm.changes.row_match import x\n")
    (spark_ivm / "bad.py").write_text("from airflow_provider_ct.spark.write_job import run_write\n")
    assert _room_violations(tmp_path / PACKAGE.name) == [
        "ivm.changes/bad.py:1 imports airflow_provider_ct.ivm.plan.planner",
        "spark.ivm/bad.py:1 imports airflow_provider_ct.spark.write_job",
    ]
