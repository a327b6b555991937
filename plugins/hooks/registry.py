"""The IdRegistry hook: a ZooKeeper ensemble from an Airflow connection.

Connection (type ``photon-zookeeper``): ``host`` is a comma-separated list
``host:port,host:port``; ``schema`` is the registry's root znode (default
``/photon``); ``login``/``password`` are the digest ACL credentials, if the
registry uses them.

How it fails: :class:`registry.RegistryUnavailableError` when no node
answers within the configured limits; the task fails and Airflow retries it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from airflow.sdk import BaseHook

from plugins.hooks.settings import REGISTRY_CONN_ID, task_settings

if TYPE_CHECKING:
    from photon.settings import PhotonSettings
    from registry import IdRegistry


class PhotonRegistryHook(BaseHook):
    conn_name_attr = "registry_conn_id"
    default_conn_name = REGISTRY_CONN_ID
    conn_type = "photon-zookeeper"
    hook_name = "Photon IdRegistry (ZooKeeper)"

    @classmethod
    def get_ui_field_behaviour(cls) -> dict[str, Any]:
        return {
            "hidden_fields": ["extra"],
            "relabeling": {
                "host": "ZooKeeper hosts (host:port,host:port,...)",
                "schema": "Registry root znode",
                "login": "ACL user (digest)",
                "password": "ACL password",
            },
            "placeholders": {"host": "127.0.0.1:2181,127.0.0.1:2182", "schema": "/photon"},
        }

    def __init__(self, registry_conn_id: str = REGISTRY_CONN_ID) -> None:
        super().__init__()
        self.registry_conn_id = registry_conn_id

    def settings(self) -> PhotonSettings:
        return task_settings(registry_conn_id=self.registry_conn_id, object_store_conn_id=None)

    def get_conn(self) -> IdRegistry:
        """A connected registry; close it (or use ``with``)."""
        from photon.registry_access import connect_registry

        return connect_registry(self.settings())

    def test_connection(self) -> tuple[bool, str]:
        """The UI's "Test" button: connect and read the sharding config."""
        try:
            with self.get_conn() as registry:
                config = registry.sharding()
        except Exception as exc:  # the button shows any failure, whatever its kind
            return False, str(exc)
        return True, f"registry {registry.root}: config v{config.version}"
