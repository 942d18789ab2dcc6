"""The four bindings of an input in an incremental tick's delta rules.

``new``: the input as it is (its pinned snapshot); ``old``: as the target's
last batch pinned it; ``plus`` / ``minus``: the rows it gained / lost in
between. Their own module so that every part of a tick that names a
binding (the inputs' views, the terms, keyed restrictions) imports the
names from one place without importing the others.
"""

from __future__ import annotations

NEW, OLD, PLUS, MINUS = "new", "old", "plus", "minus"
