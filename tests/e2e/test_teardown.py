"""Whatever the tests start is stopped, also when the test using it fails.

Each launcher the end-to-end suite uses (Airflow, the Spark cluster,
PostgreSQL) is started, its body fails, and afterwards none of its processes
is alive and nothing listens on its ports any more.
"""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from devtools.devstack import LocalAirflow
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
