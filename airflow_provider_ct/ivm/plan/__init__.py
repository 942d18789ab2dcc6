"""Planning: a query's incremental strategy (from its SQL alone), the SQL each strategy runs,
whether the target's history allows an incremental tick, the refresh rules over sizes, and
the one decision of a tick that combines them (:mod:`.decision`)."""
