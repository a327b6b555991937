"""Connections as the hooks read them, and Photon registered as an Airflow provider."""

from __future__ import annotations

import json

import pytest

from plugins.hooks.settings import as_env, object_store_overrides, registry_overrides

pytestmark = pytest.mark.unit


def connection(**fields: object) -> object:
    from airflow.sdk import Connection

    return Connection(conn_id="x", **fields)  # type: ignore[arg-type]


def test_a_registry_connection_gives_hosts_root_and_credentials() -> None:
    conn = connection(
        conn_type="photon-zookeeper",
        host="10.0.0.1:2181, 10.0.0.2:2181",
        schema="/prod",
        login="photon",
        password="secret-pw",
    )
    assert registry_overrides(conn) == {  # type: ignore[arg-type]
        "hosts": ["10.0.0.1:2181", "10.0.0.2:2181"],
        "root": "/prod",
        "auth_user": "photon",
        "auth_password": "secret-pw",
    }
    single = connection(conn_type="photon-zookeeper", host="zk1", port=2181)
    assert registry_overrides(single) == {"hosts": ["zk1:2181"]}  # type: ignore[arg-type]


def test_an_object_store_connection_gives_endpoint_keys_and_bucket() -> None:
    conn = connection(
        conn_type="photon-s3",
        host="minio",
        port=9000,
        login="key",
        password="secret-key",
        schema="photon",
        extra=json.dumps(
            {"scheme": "https", "region": "eu-west-1", "public_url": "https://s3.example:9000"}
        ),
    )
    assert object_store_overrides(conn) == {  # type: ignore[arg-type]
        "endpoint_url": "https://minio:9000",
        "access_key": "key",
        "secret_key": "secret-key",
        "bucket": "photon",
        "region": "eu-west-1",
        "public_endpoint_url": "https://s3.example:9000",
    }


def test_the_connection_given_settings_reach_a_spark_job_as_photon_variables() -> None:
    from photon.settings import load_settings

    settings = load_settings(
        zookeeper={"hosts": ["zk1:2181"], "root": "/r", "auth_user": "u", "auth_password": "p"},
        s3={"endpoint_url": "http://minio:9000", "bucket": "bkt"},
    )
    env = as_env(settings)
    assert json.loads(env["PHOTON_ZOOKEEPER__HOSTS"]) == ["zk1:2181"]
    assert env["PHOTON_ZOOKEEPER__AUTH_PASSWORD"] == "p"
    assert env["PHOTON_S3__ENDPOINT_URL"] == "http://minio:9000"
    assert env["PHOTON_S3__BUCKET"] == "bkt"


def test_photon_registers_its_connection_types_with_airflow() -> None:
    from airflow.providers_manager import ProvidersManager

    hooks = ProvidersManager().hooks  # type: ignore[no-untyped-call]
    registry, store = hooks.get("photon-zookeeper"), hooks.get("photon-s3")
    assert registry is not None and registry.hook_class_name.endswith("PhotonRegistryHook")
    assert store is not None and store.hook_class_name.endswith("PhotonObjectStoreHook")


def test_photon_registers_the_links_to_its_reports_with_airflow() -> None:
    from airflow.providers_manager import ProvidersManager

    links = ProvidersManager().extra_links_class_names  # type: ignore[no-untyped-call]
    assert "plugins.links.reports.ReportLink" in links
    assert "plugins.links.reports.DataDocsLink" in links
