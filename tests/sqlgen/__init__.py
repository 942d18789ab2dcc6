"""Generated SQL for measuring how general incremental maintenance is (issue 58, point 5).

``schema`` holds the inputs' columns and their random rows, ``generator``
composes queries over them, ``world`` keeps the inputs (real Iceberg tables
and the test's own model of them) and the DuckDB oracle, ``report`` counts
what the views did; ``tests/test_sqlgen.py`` ticks each query as a view.
"""
