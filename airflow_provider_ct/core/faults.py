"""Named fault-injection points (failpoints) for tests that crash real processes.

A crash "after the catalog commit and before the XCom push" or "while the
manifest is being written" cannot be timed from outside a process. The code
names those moments with :func:`failpoint`; a test sets ``CT_FAILPOINTS`` in
the environment of a real process (a spark-submit job, an Airflow task, a
child Python) and the process then dies, raises or pauses exactly there.
Unset (always, in production) a failpoint costs one dictionary lookup.

``CT_FAILPOINTS`` is a comma-separated list of ``name=action[@marker]``:

* ``exit``: end the process at once with status 137, as ``kill -9`` would
  (no ``finally`` blocks, no atexit handlers, no flushing);
* ``raise``: raise :class:`InjectedFault` (an ``OSError``, like a connection
  dropped while waiting for a response);
* ``sleep:<seconds>``: pause, so a test can act in the middle of a phase
  (the marker file appearing tells the test the process got there).

With ``@<marker>`` (a file path) the action fires only once: the marker file
is created first, and a failpoint whose marker exists does nothing. That is
how a test crashes a task's first attempt and lets Airflow's retry (a new
process with the same environment) run through.
"""

from __future__ import annotations

import logging
import os
import sys
import time

log = logging.getLogger(__name__)

ENV = "CT_FAILPOINTS"
#: Exit status of an injected crash (what a shell reports for SIGKILL).
CRASH_STATUS = 137


class InjectedFault(ConnectionError):
    """Raised by a ``raise`` failpoint: a transport failure with an unknown outcome."""


def _actions() -> dict[str, str]:
    spec = os.environ.get(ENV, "")
    out: dict[str, str] = {}
    for item in spec.split(","):
        name, _, action = item.strip().partition("=")
        if name:
            out[name] = action
    return out


def failpoint(name: str) -> None:
    """Act as ``CT_FAILPOINTS`` says for ``name``; nothing when it is not named."""
    if ENV not in os.environ:
        return
    action = _actions().get(name)
    if action is None:
        return
    action, _, marker = action.partition("@")
    if marker:
        try:
            with open(marker, "x"):
                pass
        except FileExistsError:
            return
    if action == "exit":
        sys.stderr.write(f"failpoint {name}: crashing (exit {CRASH_STATUS})\n")
        sys.stderr.flush()
        os._exit(CRASH_STATUS)
    if action == "raise":
        raise InjectedFault(f"failpoint {name}: injected transport failure")
    if action.startswith("sleep:"):
        log.warning("failpoint %s: sleeping %s s", name, action[6:])
        time.sleep(float(action[6:]))
        return
    raise ValueError(f"{ENV}: unknown action {action!r} for failpoint {name}")
