"""The "Continual tables" page of the Airflow UI (an Airflow plugin; see docs/ui.md).

:mod:`.status` reads the catalog (no Airflow, no FastAPI), :mod:`.producers`
asks Airflow's metadata database which DAGs produce each table,
:mod:`.render` turns both into HTML with inline CSS and SVG, :mod:`.app` serves
it behind Airflow's auth, and :mod:`.plugin` registers it with Airflow.
"""

from __future__ import annotations
