"""The Spark side of incremental maintenance: the inputs' changes as Spark views, the
incremental corrections (linear, grouped, by day) and the in-place aggregate tick, for
changes or states too large for the driver."""
