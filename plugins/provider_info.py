"""Photon as an Airflow provider: registers our connection types for the UI's connection form.

Found by Airflow through the ``apache_airflow_provider`` entry point (pyproject.toml).
"""

from __future__ import annotations

from typing import Any


def get_provider_info() -> dict[str, Any]:
    return {
        "package-name": "photon-streams",
        "name": "Photon",
        "description": "Photon's IdRegistry (ZooKeeper) and object store (S3) connections, "
        "and the links from a task to its report.",
        "extra-links": [
            "plugins.links.reports.ReportLink",
            "plugins.links.reports.DataDocsLink",
        ],
        "connection-types": [
            {
                "connection-type": "photon-zookeeper",
                "hook-class-name": "plugins.hooks.registry.PhotonRegistryHook",
            },
            {
                "connection-type": "photon-s3",
                "hook-class-name": "plugins.hooks.object_store.PhotonObjectStoreHook",
            },
        ],
    }
