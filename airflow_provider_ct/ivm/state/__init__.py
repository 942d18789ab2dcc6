"""The state a view keeps beside its target: in-place aggregates' arithmetic (state plus
signed change) and the Iceberg table that holds the state between ticks."""
