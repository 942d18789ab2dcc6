"""Delta rules evaluated on the driver with Arrow: a block's filter and expressions, a
snapshot's rows fetched by key, the joins of a change, and in-place aggregates of a
change, for ticks small enough to need no Spark job."""
