"""Whatever the tests start is stopped, also when the test using it fails.

Each launcher the end-to-end suite uses (Airflow, the Spark cluster,
PostgreSQL) is started, its body fails, and afterwards none of its processes
is alive and nothing listens on its ports any more.
"""

from __future__ import annotations

import os
import signal
import socket
import time
from pathlib import Path

import pytest

from devtools.devstack import DevStackError, LocalAirflow
from tests.pgserver import running_postgres
from tests.sparkcluster import running_spark_cluster

pytestmark = [pytest.mark.e2e, pytest.mark.slow, pytest.mark.timeout(600)]


class Boom(Exception):
    """The failure of a test body."""


def _listening(port: int) -> bool:
    with socket.socket() as sock:
        return sock.connect_ex(("127.0.0.1", port)) == 0


def test_airflow_is_stopped_when_the_test_fails(tmp_path: Path) -> None:
    dags = tmp_path / "dags"
    dags.mkdir()
    airflow = LocalAirflow(home=tmp_path / "home", dags_folder=dags)
    with pytest.raises(Boom), airflow:
        airflow.start([])
        assert _listening(airflow.port)
        assert len(airflow.survivors()) >= 4  # standalone, scheduler, triggerer, API, ...
        raise Boom
    assert airflow.survivors() == []
    assert not _listening(airflow.port)


IDLE_DAG = """
from airflow.sdk import DAG
from airflow.providers.standard.operators.empty import EmptyOperator

with DAG("idle", schedule=None):
    EmptyOperator(task_id="nothing")
"""


def _scheduler_pids(airflow: LocalAirflow) -> list[int]:
    def is_scheduler(pid: int) -> bool:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            return False
        return any(arg.endswith(b"airflow") for arg in argv) and b"scheduler" in argv

    return [pid for pid in airflow.survivors() if is_scheduler(pid)]


def test_a_wait_for_runs_ends_soon_after_the_scheduler_dies(tmp_path: Path) -> None:
    """``airflow standalone`` does not start a dead scheduler again: waiting on runs says so."""
    dags = tmp_path / "dags"
    dags.mkdir()
    (dags / "idle.py").write_text(IDLE_DAG)
    with LocalAirflow(home=tmp_path / "home", dags_folder=dags) as airflow:
        api = airflow.start(["idle"])
        api.trigger("idle", "2026-02-01T00:00:00Z")
        api.set_paused("idle", True)  # the run stays queued: only the dead scheduler is news
        pids = _scheduler_pids(airflow)
        assert pids, "no scheduler process found"
        for pid in pids:
            os.kill(pid, signal.SIGKILL)
        started = time.monotonic()
        with pytest.raises(DevStackError, match="the scheduler is down") as failed:
            api.wait_for_runs("idle", 1, timeout=900, poll=2, scheduler_grace=10)
        # Airflow calls a scheduler unhealthy 30 s after its last heartbeat.
        assert time.monotonic() - started < 180
        assert "runs stay [(" in str(failed.value)


def test_spark_cluster_is_stopped_when_the_test_fails() -> None:
    with pytest.raises(Boom), running_spark_cluster() as cluster:
        _, port = cluster.host_port
        assert cluster.state()["aliveworkers"] == 1
        assert len(cluster.processes()) >= 2  # master and worker
        raise Boom
    assert cluster.processes() == []
    assert not _listening(port)
    assert not _listening(cluster.ui_port)


def test_postgres_is_stopped_when_the_test_fails() -> None:
    with pytest.raises(Boom), running_postgres() as server:
        assert _listening(server.port)
        raise Boom
    assert not _listening(server.port)
