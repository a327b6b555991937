"""The Airflow Assets of Photon's data: what the DAGs read and write, in the UI's lineage.

* ``photon_joined_output``: the joiners' joined output (``joined/`` in the bucket).
  ``photon_output_hours`` announces each newly settled event hour of it (an
  asset event whose extra is ``{"hours": [...]}``); ``photon_verify`` runs on
  those events as well as hourly (docs/operations.md, "Assets: output hours and
  reports").
* ``photon_verify_reports``: verification reports (``reports/verify/``); each
  run's ``report`` task records one event, with the run, its verdict and key.

Named, not addressed: the bucket is a setting, so no URI would be right for
every deployment.
"""

from __future__ import annotations

from airflow.sdk import Asset

JOINED_OUTPUT = Asset(name="photon_joined_output", group="photon", extra={"prefix": "joined/"})
VERIFY_REPORTS = Asset(
    name="photon_verify_reports", group="photon", extra={"prefix": "reports/verify/"}
)
