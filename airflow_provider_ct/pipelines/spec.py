"""The spec file of a pipeline folder: Spark Declarative Pipelines' ``spark-pipeline.yml``.

SDP's keys are read as SDP reads them (``name``, ``storage``, ``libraries``,
``catalog``, ``database``/``schema``, ``configuration``), so an SDP project
that uses only SQL runs unchanged. What SDP has no word for (an Airflow
schedule, connections, the refresh default) lives under one key of ours,
``airflow:``. Every other key is refused by name: a key we dropped silently
(a Databricks ``continuous: true``, a typo of ``libraries``) would run a
pipeline other than the one its author wrote. See docs/pipelines.md.
"""

from __future__ import annotations

import glob
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

from airflow_provider_ct.exceptions import PipelineError

SPEC_NAMES = ("spark-pipeline.yml", "spark-pipeline.yaml", "pipeline.yml", "pipeline.yaml")
#: SDP keys we read.
SDP_KEYS = frozenset(
    {"name", "storage", "libraries", "catalog", "database", "schema", "configuration"}
)
#: Keys of Databricks' pipeline settings that SDP's own reader does not know
#: either; refused with what to do instead.
REFUSED_KEYS = {
    "continuous": "the Airflow schedule decides when a pipeline ticks (airflow: schedule)",
    "development": "there is no development mode; run a dry run (ct-pipeline dry-run)",
    "clusters": "Spark runs as the Spark connection says (airflow: spark_conn_id)",
    "serverless": "Spark runs as the Spark connection says (airflow: spark_conn_id)",
    "channel": "the Spark version is the one installed",
    "edition": "every feature is available",
    "photon": "Spark runs as the Spark connection says (airflow: spark_conn_id)",
    "environment": "install dependencies in the Airflow workers' environment",
    "notifications": "use Airflow's callbacks on the DAG",
    "target": "write database: (target is Databricks' older name)",
}
#: Our keys under ``airflow:``.
AIRFLOW_KEYS = frozenset(
    {
        "dag_id",
        "schedule",
        "start_date",
        "catchup",
        "iceberg_conn_id",
        "spark_conn_id",
        "engine",
        "refresh",
        "tags",
    }
)


#: Where unqualified names resolve without ``database:`` (Spark's default database).
DEFAULT_DATABASE = "default"


@dataclass(frozen=True)
class PipelineSpec:
    """A parsed spec file and the SQL files its ``libraries`` select, in order."""

    path: Path
    name: str
    files: tuple[Path, ...]
    catalog: str | None = None
    database: str | None = None
    storage: str | None = None
    configuration: Mapping[str, str] = field(default_factory=dict)
    airflow: Mapping[str, Any] = field(default_factory=dict)

    @property
    def folder(self) -> Path:
        return self.path.parent

    def shown(self, path: Path) -> str:
        """A file as errors name it: relative to the folder's parent (``shop/x.sql``)."""
        try:
            return str(path.relative_to(self.folder.parent))
        except ValueError:
            return str(path)


def find_spec(folder: str | Path) -> Path:
    """The spec file of ``folder`` (or ``folder`` itself when it is the file)."""
    path = Path(folder)
    if path.is_file():
        return path
    if not path.is_dir():
        raise PipelineError("no such pipeline folder", path=str(path))
    for name in SPEC_NAMES:
        if (path / name).is_file():
            return path / name
    raise PipelineError(f"no spec file ({' or '.join(SPEC_NAMES[:2])})", path=str(path))


def load_spec(folder: str | Path) -> PipelineSpec:
    """Read and check the spec file; every error names the file (and the key)."""
    path = find_spec(folder).resolve()
    shown = f"{path.parent.name}/{path.name}"
    try:
        raw = yaml.safe_load(path.read_text()) or {}
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        line = mark.line + 1 if mark is not None else 0
        raise PipelineError(f"not valid YAML: {exc}", path=shown, line=line) from None
    if not isinstance(raw, dict):
        raise PipelineError("the spec file must be a mapping of keys", path=shown)
    _check_keys(raw, shown)
    name = raw.get("name")
    if not isinstance(name, str) or not name.strip():
        raise PipelineError("'name' is required (the pipeline's name)", path=shown)
    airflow = raw.get("airflow") or {}
    if not isinstance(airflow, dict):
        raise PipelineError("'airflow' must be a mapping", path=shown)
    unknown = sorted(set(airflow) - AIRFLOW_KEYS)
    if unknown:
        known = ", ".join(sorted(AIRFLOW_KEYS))
        raise PipelineError(f"unknown key airflow.{unknown[0]} (known: {known})", path=shown)
    configuration = raw.get("configuration") or {}
    if not isinstance(configuration, dict):
        raise PipelineError("'configuration' must be a mapping of Spark settings", path=shown)
    database = raw.get("database", raw.get("schema"))
    return PipelineSpec(
        path=path,
        name=name.strip(),
        files=_library_files(raw.get("libraries"), path.parent, shown),
        catalog=_optional_str(raw, "catalog", shown),
        # SDP's default: Spark's current database, ``default``.
        database=str(database).lower() if database is not None else DEFAULT_DATABASE,
        storage=_optional_str(raw, "storage", shown),
        configuration={str(k): str(v) for k, v in configuration.items()},
        airflow=airflow,
    )


def _check_keys(raw: Mapping[str, Any], shown: str) -> None:
    for key in raw:
        if key in SDP_KEYS or key == "airflow":
            continue
        why = REFUSED_KEYS.get(key)
        if why is not None:
            raise PipelineError(f"key {key!r} is not supported: {why}", path=shown)
        raise PipelineError(
            f"unknown key {key!r} (SDP's keys: {', '.join(sorted(SDP_KEYS))}; ours go "
            "under 'airflow:')",
            path=shown,
        )
    if "database" in raw and "schema" in raw:
        raise PipelineError("give 'database' or 'schema', not both", path=shown)


def _optional_str(raw: Mapping[str, Any], key: str, shown: str) -> str | None:
    value = raw.get(key)
    if value is None:
        return None
    if not isinstance(value, str) or not value.strip():
        raise PipelineError(f"{key!r} must be a non-empty string", path=shown)
    return value.strip()


def _library_files(libraries: Any, folder: Path, shown: str) -> tuple[Path, ...]:
    """The files ``libraries`` selects: ``- glob: {include: pattern}`` entries, in order.

    SDP 4.1 accepts a file or a folder ending in ``/**`` as ``include``;
    without ``libraries`` SDP reads ``transformations/**``. Python files are
    read with SDP's decorators (:mod:`.python`); other files in a selected
    folder are skipped, as SDP skips them.
    """
    entries = libraries if libraries is not None else [{"glob": {"include": "transformations/**"}}]
    if not isinstance(entries, list) or not entries:
        raise PipelineError("'libraries' must be a non-empty list of '- glob: ...'", path=shown)
    found: list[Path] = []
    for entry in entries:
        pattern = _include(entry, shown)
        matches = sorted(Path(p) for p in glob.glob(str(folder / pattern), recursive=True))
        matches = [m for m in matches if m.is_file()]
        if not matches:
            raise PipelineError(f"libraries: {pattern!r} matches no file", path=shown)
        for match in matches:
            if match.suffix in (".sql", ".py") and match.resolve() not in found:
                found.append(match.resolve())
    return tuple(found)


def _include(entry: Any, shown: str) -> str:
    glob_entry = entry.get("glob") if isinstance(entry, dict) else None
    include = glob_entry.get("include") if isinstance(glob_entry, dict) else None
    if not isinstance(include, str) or not include.strip():
        raise PipelineError(
            f"libraries: expected '- glob: {{include: <pattern>}}', got {entry!r:.80}", path=shown
        )
    pattern = include.strip()
    if Path(pattern).is_absolute() or ".." in Path(pattern).parts:
        raise PipelineError(f"libraries: {pattern!r} must stay inside the folder", path=shown)
    return pattern
