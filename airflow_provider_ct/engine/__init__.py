"""The warm engine: write jobs on a long-lived Spark driver shared by a host's tasks.

:mod:`.choice` decides which engine a task uses, :mod:`.server` is the driver
(a plain Python program), :mod:`.client` what a task runs to reach it,
:mod:`.protocol` what both share. See docs/engines.md.
"""
