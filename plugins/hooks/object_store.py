"""The object store hook: the S3 endpoint (MinIO, or moto natively) from a connection.

Connection (type ``photon-s3``): ``host`` is the endpoint (``http://host``
or ``host`` with ``extra.scheme``), ``port`` its port, ``login``/``password``
the access and secret keys, ``schema`` the bucket, ``extra.region`` the region,
``extra.public_url`` the endpoint as browsers reach it (the links to reports).

How it fails: :class:`photon.storage.ObjectStoreError` after bounded retries.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from plugins.hooks.settings import OBJECT_STORE_CONN_ID, task_settings

if TYPE_CHECKING:
    from photon.settings import PhotonSettings
    from photon.storage import ObjectStore


class PhotonObjectStoreHook(BaseHook):
    conn_name_attr = "object_store_conn_id"
    default_conn_name = OBJECT_STORE_CONN_ID
    conn_type = "photon-s3"
    hook_name = "Photon object store (S3)"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": [],
            "relabeling": {
                "host": "Endpoint (http://host)",
                "schema": "Bucket",
                "login": "Access key",
                "password": "Secret key",
            },
            "placeholders": {"host": "http://127.0.0.1", "port": "9000", "schema": "photon"},
        }

    def __init__(self, object_store_conn_id: str = OBJECT_STORE_CONN_ID) -> None:
        super().__init__()
        self.object_store_conn_id = object_store_conn_id

    def settings(self) -> PhotonSettings:
        return task_settings(registry_conn_id=None, object_store_conn_id=self.object_store_conn_id)

    def get_conn(self) -> ObjectStore:
        from photon.storage import ObjectStore

        return ObjectStore.from_settings(self.settings())

    def test_connection(self) -> tuple[bool, str]:
        """The UI's "Test" button: list the bucket."""
        from photon.join.output import output_prefix

        try:
            store = self.get_conn()
            next(iter(store.keys(output_prefix("joined"))), None)
        except Exception as exc:  # the button shows any failure, whatever its kind
            return False, str(exc)
        return True, f"bucket {store.bucket} is readable"
