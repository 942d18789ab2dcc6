"""`make demo`'s script end to end: it must succeed and leave nothing running.

Runs ``scripts/demo.py`` with a short backfill and one tick in its own home
and checks what a person relies on: exit status 0, the backfill's own check
("one snapshot per hour"), the frontier table, the UI address with a login,
and, afterwards, nothing listening on the UI's port any more.
"""

from __future__ import annotations

import re
import socket
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.timeout(2400), pytest.mark.e2e, pytest.mark.slow, pytest.mark.spark]

ROOT = Path(__file__).resolve().parents[2]


def test_demo_runs_end_to_end_and_stops_everything(tmp_path: Path) -> None:
    home = tmp_path / "demo-home"
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "scripts" / "demo.py"),
            "--home",
            str(home),
            "--backfill-hours",
            "1",
            "--ticks",
            "1",
        ],
        capture_output=True,
        text=True,
        timeout=2200,
    )
    out = done.stdout + done.stderr
    assert done.returncode == 0, out[-6000:]
    assert "backfill done: one snapshot per hour" in out
    assert re.search(r"^table\s+upper \(exclusive\)\s+newest ct.time", out, re.M), out[-3000:]
    assert re.search(r"^shop\.revenue_per_customer\s+\d{4}-", out, re.M), out[-3000:]
    # The SQL folder's gold view ticked (at the demo's ticks at now).
    assert re.search(r"^shop_sql\.revenue_daily\s+\d{4}-", out, re.M), out[-3000:]
    ui = re.search(r"UI:\s+http://127\.0\.0\.1:(\d+)\s+login: admin / \S+", out)
    assert ui is not None, out[:2000]
    with socket.socket() as sock:  # the API server is gone
        assert sock.connect_ex(("127.0.0.1", int(ui.group(1)))) != 0
