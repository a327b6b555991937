"""The Airflow connections ``photon airflow up`` makes from the settings."""

from __future__ import annotations

import json

import pytest

from photon.settings import SettingsError, load_settings
from photon.tooling.stack.airflow import connection_env

pytestmark = pytest.mark.unit


def test_no_mail_server_no_smtp_connection() -> None:
    env = connection_env(load_settings())
    assert "AIRFLOW_CONN_PHOTON_SMTP" not in env
    assert {"AIRFLOW_CONN_PHOTON_REGISTRY", "AIRFLOW_CONN_PHOTON_OBJECT_STORE"} <= set(env)


def test_the_alerts_mail_server_becomes_the_smtp_connection() -> None:
    settings = load_settings(
        alerts={"smtp_host": "mail.example.com", "smtp_port": 2525, "email_to": ["a@b.c"]}
    )
    conn = json.loads(connection_env(settings)["AIRFLOW_CONN_PHOTON_SMTP"])
    assert (conn["conn_type"], conn["host"], conn["port"]) == ("smtp", "mail.example.com", 2525)
    assert conn["extra"]["disable_tls"] is True and conn["extra"]["disable_ssl"] is True


def test_recipients_are_checked() -> None:
    with pytest.raises(SettingsError, match=r"alerts\.email_to"):
        load_settings(alerts={"email_to": ["not-an-address"]})
