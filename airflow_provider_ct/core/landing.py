"""Did this batch land? The one rule every path asks.

A batch is identified by its id (``ct.batch-id`` in its snapshots' summaries)
and, for staged batches, by the write *attempt* whose files it registered
(``ct.attempt``). The question comes up after a retried task, a duplicate
run, a commit with an unknown outcome, a lost race and in the sweep; every
fault fixed so far lived in one of the places that answered it on its own.
The answer, in this order:

1. the batch is on ``main`` by this attempt (or the caller has no attempt):
   :attr:`Landing.MINE`;
2. it is on ``main`` by another attempt: :attr:`Landing.OTHER_ATTEMPT` (this
   attempt's files are referenced by nothing);
3. no snapshot on ``main`` names it, but files it staged are referenced by a
   kept snapshot: the snapshot it landed in was expired, the batch is still
   the table's, :attr:`Landing.FILES_LIVE` (never delete those files);
4. otherwise :attr:`Landing.NOT_LANDED`.

:func:`~airflow_provider_ct.core.appending.land_staged` (the append of a
staged batch), the sweep, the commit's own retry check, the append task's
retry without a manifest and the collections' unknown-outcome paths all ask
:func:`landing_of`.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from enum import Enum

from airflow_provider_ct.core.keys import SummaryKeys
from airflow_provider_ct.core.timeline import Timeline, TimelineEntry


class Landing(Enum):
    MINE = "mine"
    OTHER_ATTEMPT = "other-attempt"
    FILES_LIVE = "files-live"
    NOT_LANDED = "not-landed"


@dataclass(frozen=True)
class Landed:
    """The answer for one batch (and attempt)."""

    landing: Landing
    #: The first snapshot on ``main`` of the batch, if one names it.
    entry: TimelineEntry | None = None
    #: The attempt on the table (``""`` for batches without attempts or unknown).
    attempt: str = ""

    @property
    def on_table(self) -> bool:
        """Whether the batch's rows are the table's (by whichever attempt)."""
        return self.landing is not Landing.NOT_LANDED


def landing_of(
    timeline: Timeline,
    batch_id: str,
    *,
    attempt: str = "",
    files_live: Callable[[], bool] | None = None,
) -> Landed:
    """Where ``batch_id`` (``attempt``'s, if given) stands on ``timeline``: the rule above.

    :param files_live: whether files the batch staged are referenced by a
        kept snapshot; called only when no snapshot on ``main`` names the
        batch (it reads manifests). ``None``: the batch staged no file, or
        the caller cannot tell.
    """
    entry = timeline.find_batch(batch_id)
    if entry is not None:
        on_table = entry.summary.get(SummaryKeys.ATTEMPT, "")
        mine = not attempt or on_table == attempt
        return Landed(Landing.MINE if mine else Landing.OTHER_ATTEMPT, entry, on_table)
    if files_live is not None and files_live():
        return Landed(Landing.FILES_LIVE, None, attempt)
    return Landed(Landing.NOT_LANDED)
