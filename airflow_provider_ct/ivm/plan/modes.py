"""The refresh modes of a view, as one enum checked in one place.

Kept apart from the decision (:mod:`.decision`) because the planner needs
the mode too (``refresh="full"`` plans nothing; ``"incremental"`` refuses a
query without a strategy) and the decision imports the planner.
"""

from __future__ import annotations

from enum import StrEnum

from airflow_provider_ct.exceptions import ConfigurationError


class RefreshMode(StrEnum):
    """``refresh=`` of a view.

    ``auto``: incremental where the query, the target's history and the
    refresh rules allow; ``incremental``: the same without the size rules,
    and a query whose shape has no strategy is refused; ``full``: always the
    full correction.
    """

    AUTO = "auto"
    INCREMENTAL = "incremental"
    FULL = "full"

    @classmethod
    def parse(cls, value: object) -> RefreshMode:
        """The mode ``value`` names; the one check of a ``refresh=`` (a border calls it)."""
        try:
            return cls(value if isinstance(value, str) else repr(value))
        except ValueError:
            modes = ", ".join(m.value for m in cls)
            raise ConfigurationError(f"refresh={value!r}: expected one of {modes}") from None
