"""Submit one of Photon's Spark batch jobs (``spark_apps/<job>.py``) with spark-submit.

A ``SparkSubmitOperator`` whose application is found by module name when the
task runs, whose master comes from the Spark connection (``spark_default``:
``local[*]`` by default, any master URL), and whose environment carries the
task's Photon settings (``PHOTON_*``, from the registry and object store
connections), the project's interpreter for the Python workers and the
virtualenv's ``spark-submit`` on PATH.
"""

from __future__ import annotations

import os
import sys
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from airflow.providers.apache.spark.operators.spark_submit import SparkSubmitOperator
from airflow.sdk import Context

from plugins.hooks.settings import OBJECT_STORE_CONN_ID, REGISTRY_CONN_ID, SPARK_CONN_ID

JOBS = ("verify_output", "compact_logmap")


class PhotonSparkSubmitOperator(SparkSubmitOperator):
    def __init__(
        self,
        *,
        job: str,
        registry_conn_id: str = REGISTRY_CONN_ID,
        object_store_conn_id: str = OBJECT_STORE_CONN_ID,
        conn_id: str = SPARK_CONN_ID,
        **kwargs: Any,
    ) -> None:
        if job not in JOBS:
            raise ValueError(f"unknown Photon Spark job {job!r}; one of {', '.join(JOBS)}")
        super().__init__(application=f"spark_apps/{job}.py", conn_id=conn_id, **kwargs)
        self.job = job
        self.registry_conn_id = registry_conn_id
        self.object_store_conn_id = object_store_conn_id

    def execute(self, context: Context) -> None:
        from plugins.hooks.settings import as_env, task_settings
        from spark_apps.session import driver_launch_conf, spark_python_env

        spec = find_spec(f"spark_apps.{self.job}")
        if spec is None or spec.origin is None:
            raise FileNotFoundError(f"the Spark job spark_apps.{self.job} is not installed")
        self.application = spec.origin
        settings = task_settings(self.registry_conn_id, self.object_store_conn_id)
        bin_dir = str(Path(sys.executable).parent)
        passed = {k: v for k, v in os.environ.items() if k.startswith("PHOTON_")}
        # The hook resolves the connection's master; it is made again below with the env.
        master = str(self._get_hook()._connection["master"])
        self.env_vars = {
            **passed,
            **as_env(settings),
            **(self.env_vars or {}),
            # The driver runs here; the workers too on a local master (docs/deploy.md,
            # "Start-up": SPARK_HOME's zips left out of their imports).
            **spark_python_env(local_master=master.startswith("local"), submitted=True),
            "PATH": bin_dir + os.pathsep + os.environ.get("PATH", ""),
        }
        self.conf = {
            **driver_launch_conf(settings.pipeline),
            **(self.conf or {}),
            "spark.ui.enabled": "false",
        }
        super().execute(context)
