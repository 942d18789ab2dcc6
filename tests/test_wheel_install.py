"""The provider installs like any Airflow provider: a clean wheel in a fresh venv.

Builds the wheel with ``pip wheel --no-deps .`` from a copy of the source
tree, installs it with ``pip install -c constraints.txt`` semantics (uv's pip,
with its local cache, for speed) into a new virtualenv that has nothing of
ours, and asks that venv's Airflow about the provider. About a minute with a
warm uv cache; marked ``e2e`` (it installs Airflow).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
UV = Path(sys.executable).parent / "uv"
#: What must never ship: development tooling and its dependencies.
FORBIDDEN = ("devstack", "devbrowser", "selenium", "devtools/", "tests/", "scripts/")

pytestmark = [pytest.mark.e2e, pytest.mark.slow]


def _run(cmd: list[str], **kwargs: object) -> str:
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kwargs)  # type: ignore[call-overload]
    assert out.returncode == 0, f"{cmd} failed:\n{out.stdout}\n{out.stderr}"
    return str(out.stdout)


def _json_line(text: str) -> object:
    return json.loads(next(line for line in text.splitlines() if line.startswith(("[", "{"))))


@pytest.fixture(scope="module")
def wheel(tmp_path_factory: pytest.TempPathFactory) -> Path:
    src = tmp_path_factory.mktemp("src") / "airflow-provider-ct"
    ignore = shutil.ignore_patterns(
        ".venv", ".git", ".demo", "build", "*.egg-info", "test-artifacts", "__pycache__", ".*cache"
    )
    shutil.copytree(ROOT, src, ignore=ignore)
    out = tmp_path_factory.mktemp("dist")
    _run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", ".", "-w", str(out)], cwd=src)
    (found,) = out.glob("airflow_provider_ct-*.whl")
    return found


def test_the_wheel_holds_the_provider_alone(wheel: Path) -> None:
    names = zipfile.ZipFile(wheel).namelist()
    assert "airflow_provider_ct/views.py" in names
    assert "airflow_provider_ct/spark/write_job.py" in names
    shipped = [n for n in names if any(bad in n for bad in FORBIDDEN)]
    assert shipped == [], f"development tooling in the wheel: {shipped}"


def test_installed_into_a_fresh_venv_airflow_lists_the_provider(
    wheel: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "venv"
    _run([str(UV), "venv", "-q", "--python", sys.executable, str(venv)])
    python = venv / "bin" / "python"
    constraints = str(ROOT / "constraints.txt")
    _run([str(UV), "pip", "install", "-q", "--python", str(python), "-c", constraints, str(wheel)])
    env = {**os.environ, "AIRFLOW_HOME": str(tmp_path / "airflow-home")}
    env.pop("PYTHONPATH", None)
    airflow = str(venv / "bin" / "airflow")
    listing = _json_line(_run([airflow, "providers", "list", "-o", "json"], env=env, cwd=tmp_path))
    assert isinstance(listing, list)
    assert "airflow-provider-ct" in {p["package_name"] for p in listing}
    got = _json_line(
        _run(
            [airflow, "providers", "get", "airflow-provider-ct", "--full", "-o", "json"],
            env=env,
            cwd=tmp_path,
        )
    )
    info = got[0] if isinstance(got, list) else got
    assert isinstance(info, dict)
    operators = info["operators"][0]["python-modules"]
    assert "airflow_provider_ct.operators.write" in operators
    types = {c["connection-type"] for c in info["connection-types"]}
    assert "iceberg_catalog" in types
    probe = (
        "import airflow_provider_ct as p, importlib.util as u;"
        "from airflow_provider_ct import materialized_view, continual_task;"
        "print('probe', p.__file__, u.find_spec('devtools'), u.find_spec('selenium'))"
    )
    out = _run([str(python), "-c", probe], env=env, cwd=tmp_path)
    line = next(line for line in out.splitlines() if line.startswith("probe "))
    _, location, devtools, selenium = line.split()
    assert location.startswith(str(venv)), location
    assert (devtools, selenium) == ("None", "None")
