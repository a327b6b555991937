"""What the Spark apps promise the tooling that starts them, defined once here.

An app is started as ``python -m <module>`` (:data:`APP_MODULES`, or
:data:`DC_PIPELINE_MODULE` for both apps of a DC in one Spark application,
docs/join.md, "The apps"; :data:`NATIVE_JOIN_MODULE` for the comparison with
Spark's own join). When it stops it leaves :data:`SUMMARY_FILE` in its state
directory: one JSON object, written whole and then renamed, so a reader sees
the last summary or none (:func:`write_summary`, :func:`read_summary`).

This module imports no Spark: ``photon run`` reads it without starting a JVM.
How it fails: :func:`read_summary` returns ``{}`` for a summary that is missing
or not JSON (an app killed before it wrote one); writing raises ``OSError``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from photon.apps import JOINER, QUERY_READER
from photon.localfiles import write_whole
from photon.settings import RESTARTS_ENV_VAR

#: Each app's module, by app name.
APP_MODULES = {QUERY_READER: "spark_apps.query_reader", JOINER: "spark_apps.joiner"}
#: Both apps of a DC in one Spark application (the query reader's stream first).
DC_PIPELINE_MODULE = "spark_apps.dc_pipeline"
#: What a Spark user would write instead of Photon (``photon bench compare``).
NATIVE_JOIN_MODULE = "spark_apps.native_join"
#: The closing summary's name in an app's state directory.
SUMMARY_FILE = "summary.json"
#: How many times ``photon run`` restarted the app (photon.tooling.pipeline): an app
#: reports it as the gauge photon_app_restarts.
RESTARTS_ENV = RESTARTS_ENV_VAR


def write_summary(state_dir: Path, data: Mapping[str, Any]) -> Path:
    """The app's closing summary, read by ``photon run`` (written whole, then renamed)."""
    text = json.dumps(data, indent=2, sort_keys=True, default=str) + "\n"
    return write_whole(state_dir / SUMMARY_FILE, text.encode())


def read_summary(state_dir: Path) -> dict[str, Any]:
    """The summary an app wrote into ``state_dir`` when it stopped ({} if none)."""
    try:
        data: dict[str, Any] = json.loads((state_dir / SUMMARY_FILE).read_text())
    except (FileNotFoundError, ValueError):
        return {}
    return data
