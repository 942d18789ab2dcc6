"""A real Spark standalone cluster (master + one worker on 127.0.0.1) for tests.

pip's pyspark has no start-master.sh; ``sbin/spark-daemon.sh`` starts the
master and worker classes directly. Everything lives in a temporary folder
and is stopped on exit, also when the test fails.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pyspark

from devtools.devstack import reap, stack_processes
from tests.pgserver import free_port


@dataclass(frozen=True)
class SparkCluster:
    """A running cluster: its master URL and the master's web UI port."""

    master: str
    ui_port: int
    ident: str  # SPARK_IDENT_STRING of its daemons (and their executors)

    def processes(self) -> list[int]:
        """Pids of the master, the worker and executors still alive."""
        return stack_processes(self.ident, marker="SPARK_IDENT_STRING")

    @property
    def host_port(self) -> tuple[str, int]:
        """``("spark://127.0.0.1", port)``: the ``host`` and ``port`` of a spark connection."""
        host, port = self.master.rsplit(":", 1)
        return host, int(port)

    def state(self) -> dict[str, Any]:
        """The master's own account (``/json/``): workers, active and completed apps."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.ui_port}/json/", timeout=5) as resp:
            return dict(json.load(resp))

    def app_names(self) -> list[str]:
        """Names of every application the master ran or runs."""
        state = self.state()
        return [app["name"] for app in state.get("activeapps", []) + state.get("completedapps", [])]


@contextlib.contextmanager
def running_spark_cluster(
    worker_cores: int = 2, worker_memory: str = "2g"
) -> Iterator[SparkCluster]:
    """Yields the running cluster (master ``spark://127.0.0.1:<port>``); stops it on exit."""
    home = Path(pyspark.__file__).parent
    work = Path(tempfile.mkdtemp(prefix="ct-spark-cluster-"))
    ident = work.name
    env = {
        **os.environ,
        "SPARK_HOME": str(home),
        "SPARK_LOCAL_IP": "127.0.0.1",
        "SPARK_PID_DIR": str(work / "pids"),
        "SPARK_LOG_DIR": str(work / "logs"),
        "SPARK_WORKER_DIR": str(work / "worker"),
        "SPARK_IDENT_STRING": ident,
        "SPARK_NO_DAEMONIZE": "",
    }
    env.pop("SPARK_NO_DAEMONIZE")
    daemon = str(home / "sbin" / "spark-daemon.sh")
    port, ui, worker_ui = free_port(), free_port(), free_port()
    master = f"spark://127.0.0.1:{port}"
    master_class = "org.apache.spark.deploy.master.Master"
    worker_class = "org.apache.spark.deploy.worker.Worker"
    try:
        subprocess.run(
            [
                daemon,
                "start",
                master_class,
                "1",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--webui-port",
                str(ui),
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        subprocess.run(
            [
                daemon,
                "start",
                worker_class,
                "1",
                master,
                "--host",
                "127.0.0.1",
                "--cores",
                str(worker_cores),
                "--memory",
                worker_memory,
                "--webui-port",
                str(worker_ui),
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        cluster = SparkCluster(master, ui, ident)
        deadline = time.monotonic() + 90
        while True:
            try:
                if cluster.state().get("aliveworkers", 0) >= 1:
                    break
            except OSError:
                pass
            if time.monotonic() > deadline:
                logs = "\n".join(p.read_text()[-2000:] for p in (work / "logs").glob("*"))
                raise RuntimeError(f"the Spark cluster did not come up:\n{logs}")
            time.sleep(0.5)
        yield cluster
    finally:
        for cls in (worker_class, master_class):
            subprocess.run([daemon, "stop", cls, "1"], env=env, capture_output=True)
        # spark-daemon.sh stop only signals: wait for the JVMs to exit.
        reap(lambda: stack_processes(ident, marker="SPARK_IDENT_STRING"))
        shutil.rmtree(work, ignore_errors=True)
