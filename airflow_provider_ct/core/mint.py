"""Minting batch descriptions: when may a tick write, and what exactly.

The rules (after the persist sink's ``mint`` operator, seed ``001``):

* mint only when the desired frontier (``T + 1``) is ahead of the target's
  upper ``U``; a tick whose ``T`` is below ``U`` is already sealed;
* the description's lower is ``U`` and its upper is ``T + 1``, so lowers of
  successive descriptions strictly increase as the upper advances;
* at most one valid description per lower: the id is derived from the
  content, so minting the same tick again yields the same description, and a
  different tick at the same lower supersedes the old one only when the
  caller says the old one is finished (Airflow runs one tick at a time per
  target with ``max_active_runs=1``);
* an upper below a previous description's lower means the table's frontier
  went backwards: refuse;
* in read-only mode nothing is minted;
* a target that exists without our frontier (created by the user) is
  adopted: its upper counts as the minimum.

Inputs are pinned as of ``T``: each input must have sealed ``T`` (the sensor
waits for that), and the pinned snapshot is the one holding the input's
contents at ``T``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TypeGuard

from airflow_provider_ct.core.description import BatchDescription
from airflow_provider_ct.core.frontier import Frontier, check_timestamp
from airflow_provider_ct.core.timeline import Timeline
from airflow_provider_ct.exceptions import FrontierRegressionError, TimeNotSealedError


@dataclass(frozen=True)
class MintDecision:
    """A description to write, or the reason there is none."""

    description: BatchDescription | None
    reason: str


def pin_inputs(inputs: Mapping[str, Timeline], time: int) -> dict[str, int | None]:
    """Each input's snapshot as of ``time``; every input must have sealed it."""
    pinned: dict[str, int | None] = {}
    for name, timeline in sorted(inputs.items()):
        if not timeline.upper.seals(time):
            raise TimeNotSealedError(
                f"input {name} is not complete through {time}: its upper is "
                f"{timeline.upper.to_summary()} (wait with FrontierSensor first)"
            )
        pinned[name] = timeline.snapshot_at(time)
    return pinned


def mint(
    *,
    target: str,
    target_timeline: Timeline | None,
    time: int,
    inputs: Mapping[str, Timeline],
    read_only: bool = False,
    previous: BatchDescription | None = None,
) -> MintDecision:
    """Decide what tick ``time`` of ``target`` may write.

    :param target_timeline: ``None`` when the target table does not exist yet.
    :param previous: the last description minted for this target, if known.
    """
    check_timestamp(time, "tick time")
    if read_only:
        return MintDecision(None, "read-only mode: minting nothing")
    upper = target_upper(target_timeline)
    if upper.is_empty:
        return MintDecision(None, f"target {target} is closed (its upper is empty)")
    if upper.seals(time):
        return MintDecision(
            None,
            f"T={time} is below the upper {upper.to_summary()} of {target}: already sealed; "
            "times below the upper are immutable",
        )
    if _same_table(previous, target, target_timeline) and upper < previous.lower:
        raise FrontierRegressionError(
            f"target {target}: upper {upper.to_summary()} is behind the lower "
            f"{previous.lower.to_summary()} of description {previous.id}; the frontier went "
            "backwards"
        )
    description = describe(target, target_timeline, time, pin_inputs(inputs, time))
    if previous is not None and previous.id == description.id:
        return MintDecision(previous, "re-minted the same description (idempotent)")
    adopting = target_timeline is not None and not target_timeline.managed
    how = f"adopting {target} (created without our frontier): " if adopting else ""
    return MintDecision(description, f"{how}minted [{upper.to_summary()}, {time + 1}) for T={time}")


def describe(
    target: str, target_timeline: Timeline | None, time: int, pinned: Mapping[str, int | None]
) -> BatchDescription:
    """The description of tick ``time`` of ``target`` over inputs already ``pinned``.

    What :func:`mint` builds once it has decided the tick may write; also
    the description of a part of a view's query, which the view's own tick
    pins (``spark/composed.py``). The caller has checked that the target's
    upper does not seal ``time``.
    """
    return BatchDescription(
        target=target,
        lower=target_upper(target_timeline),
        upper=Frontier.sealing(time),
        time=time,
        base_snapshot_id=target_timeline.head_snapshot_id if target_timeline else None,
        inputs=dict(pinned),
        table_uuid=target_timeline.table_uuid if target_timeline is not None else None,
    )


def _same_table(
    previous: BatchDescription | None, target: str, timeline: Timeline | None
) -> TypeGuard[BatchDescription]:
    """Whether ``previous`` was minted for the very table ``timeline`` reads.

    A table dropped and recreated under the same name (a redeployed
    pipeline, a test reusing a DAG id) starts a new history: its frontier
    starting over is not the frontier going backwards. A description minted
    before the table existed pins nothing to compare. Nor does one minted
    before an explicit :func:`~airflow_provider_ct.core.commit.accept_frontier_regression`:
    the table's high-water mark, which only that call lowers, is then below
    the description's lower.
    """
    return (
        previous is not None
        and previous.target == target
        and timeline is not None
        and previous.table_uuid is not None
        and previous.table_uuid == timeline.table_uuid
        and not (timeline.high_water is not None and timeline.high_water < previous.lower)
    )


def target_upper(timeline: Timeline | None) -> Frontier:
    """The target's upper; nothing is sealed in a target we have not written yet.

    A table the user created for the view (to choose its partitioning,
    properties or grants) has no frontier of ours. Read as an input its
    upper would be the wall clock, every tick would find itself "already
    sealed", and the table would stay empty for ever: as a target it is
    adopted instead, from the minimum, and its first batch is the full
    correction against whatever it holds.
    """
    if timeline is None or not timeline.managed:
        return Frontier.minimum()
    return timeline.upper
