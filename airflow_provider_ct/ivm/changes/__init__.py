"""Changes between snapshots: the rows a range of an Iceberg table's snapshots inserted and
deleted, read from manifests and the touched files (PyIceberg and PyArrow, no Spark)."""
