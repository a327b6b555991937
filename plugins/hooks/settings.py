"""Photon's settings as a task sees them: the settings layers plus its Airflow connections.

The registry's hosts, root and credentials come from the registry
connection, the object store's endpoint, keys and bucket from the object
store connection; everything else (retention, DCs, logs, local state) from
Photon's own settings (``PHOTON_CONFIG``, ``PHOTON_*``), which ``photon
airflow up`` passes to every Airflow process. ``as_env`` turns the result
back into ``PHOTON_*`` variables for the Spark jobs a task submits.
"""

from __future__ import annotations

import json
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from airflow.sdk import Connection

    from photon.settings import PhotonSettings

REGISTRY_CONN_ID = "photon_registry"
OBJECT_STORE_CONN_ID = "photon_object_store"
SPARK_CONN_ID = "spark_default"


def registry_overrides(conn: Connection) -> dict[str, Any]:
    """The ``zookeeper`` settings a registry connection gives."""
    hosts = [h.strip() for h in (conn.host or "").split(",") if h.strip()]
    if conn.port and len(hosts) == 1 and ":" not in hosts[0]:
        hosts = [f"{hosts[0]}:{conn.port}"]
    values: dict[str, Any] = {}
    if hosts:
        values["hosts"] = hosts
    if conn.schema:
        values["root"] = conn.schema
    if conn.login:
        values["auth_user"] = conn.login
        values["auth_password"] = conn.password or ""
    return values


def object_store_overrides(conn: Connection) -> dict[str, Any]:
    """The ``s3`` settings an object store connection gives."""
    values: dict[str, Any] = {}
    extra = conn.extra_dejson
    if conn.host:
        scheme = extra.get("scheme", "http")
        host = conn.host if "://" in conn.host else f"{scheme}://{conn.host}"
        values["endpoint_url"] = f"{host}:{conn.port}" if conn.port else host
    if conn.login:
        values["access_key"] = conn.login
    if conn.password:
        values["secret_key"] = conn.password
    if conn.schema:
        values["bucket"] = conn.schema
    if extra.get("region"):
        values["region"] = extra["region"]
    if extra.get("public_url"):
        values["public_endpoint_url"] = extra["public_url"]
    return values


def task_settings(
    registry_conn_id: str | None = REGISTRY_CONN_ID,
    object_store_conn_id: str | None = OBJECT_STORE_CONN_ID,
) -> PhotonSettings:
    """Photon's settings with the connections applied (a connection id of None: skipped)."""
    from airflow.sdk import BaseHook

    from photon.settings import load_settings

    base = load_settings()
    overrides: dict[str, Any] = {}
    if registry_conn_id:
        zk = registry_overrides(BaseHook.get_connection(registry_conn_id))
        overrides["zookeeper"] = base.zookeeper.model_dump() | zk
    if object_store_conn_id:
        s3 = object_store_overrides(BaseHook.get_connection(object_store_conn_id))
        overrides["s3"] = _plain(base.s3.model_dump()) | s3
    if "zookeeper" in overrides:
        overrides["zookeeper"] = _plain(overrides["zookeeper"])
    return load_settings(**overrides) if overrides else base


def _plain(values: dict[str, Any]) -> dict[str, Any]:
    """Secrets as their values (model_dump keeps SecretStr objects)."""
    return {
        k: v.get_secret_value() if hasattr(v, "get_secret_value") else v for k, v in values.items()
    }


def as_env(settings: PhotonSettings) -> dict[str, str]:
    """``PHOTON_*`` variables that reproduce the connection-given settings in a child process."""
    zk, s3 = settings.zookeeper, settings.s3
    env = {
        "PHOTON_ZOOKEEPER__HOSTS": json.dumps(settings.zk_hosts),
        "PHOTON_ZOOKEEPER__ROOT": zk.root,
        "PHOTON_S3__ENDPOINT_URL": settings.s3_endpoint_url,
        "PHOTON_S3__ACCESS_KEY": s3.access_key,
        "PHOTON_S3__SECRET_KEY": s3.secret_key.get_secret_value(),
        "PHOTON_S3__BUCKET": s3.bucket,
        "PHOTON_S3__REGION": s3.region,
    }
    if zk.auth_user is not None and zk.auth_password is not None:
        env["PHOTON_ZOOKEEPER__AUTH_USER"] = zk.auth_user
        env["PHOTON_ZOOKEEPER__AUTH_PASSWORD"] = zk.auth_password.get_secret_value()
    return env
