"""The tooling that runs Photon on a machine: the ``photon`` CLI, the local stack, the
demo's generator and audit, chaos, the benchmarks and the monitoring views
(docs/ARCHITECTURE.md, "The packages"). It imports the domain (``photon``) and
starts the Spark apps; nothing in the domain imports it.
"""

from pathlib import Path

#: The source tree the tooling runs from: ``infra/`` and ``dags/`` sit beside ``photon/``.
PROJECT_ROOT = Path(__file__).resolve().parents[2]
