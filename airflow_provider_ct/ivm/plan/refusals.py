"""The planner's refusal: a shape without an incremental strategy, and why.

Raised wherever a part of the planner reads the SQL (:mod:`.planner`,
:mod:`.left_join`) and caught by the planner, which turns it into a
``full`` plan with the message as its reason. Never leaves the planning.
"""

from __future__ import annotations


class NotIncremental(Exception):
    """The query's shape has no incremental strategy; the message says why."""
