"""A failed operations DAG run sends one mail, through the SMTP provider, to a real sink."""

from __future__ import annotations

import json
from collections.abc import Iterator
from email import message_from_bytes
from email.message import Message
from typing import Any

import pytest
from aiosmtpd.controller import Controller

from photon.settings import AlertSettings
from photon.tooling.stack.airflow import smtp_connection
from photon.tooling.stack.ports import free_ports
from tests.conftest import RunDag
from tests.integration.dags.conftest import task_states
from tests.integration.ops_pipelines import OpsPhoton

pytestmark = pytest.mark.integration

FUTURE = "2099-01-01T00:00:00+00:00"


class _Sink:
    """An SMTP server on loopback that keeps every message it is sent."""

    def __init__(self) -> None:
        self.messages: list[Message] = []

    async def handle_DATA(self, server: Any, session: Any, envelope: Any) -> str:
        self.messages.append(message_from_bytes(envelope.content))
        return "250 OK"


@pytest.fixture
def smtp_sink() -> Iterator[tuple[_Sink, int]]:
    [port] = free_ports(1)
    sink = _Sink()
    controller = Controller(sink, hostname="127.0.0.1", port=port)
    controller.start()
    try:
        yield sink, port
    finally:
        controller.stop()


def test_a_failed_run_sends_one_mail_naming_the_dag_and_its_failed_task(
    run_dag: RunDag,
    ops_photon: OpsPhoton,
    smtp_sink: tuple[_Sink, int],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    sink, port = smtp_sink
    alerts = AlertSettings(
        email_to=["oncall@example.com"], email_from="photon@example.com",
        smtp_host="127.0.0.1", smtp_port=port,
    )  # fmt: skip
    monkeypatch.setenv("PHOTON_ALERTS__EMAIL_TO", "oncall@example.com")
    monkeypatch.setenv("PHOTON_ALERTS__EMAIL_FROM", "photon@example.com")
    monkeypatch.setenv("AIRFLOW_CONN_PHOTON_SMTP", json.dumps(smtp_connection(alerts)))

    # a window ending in the future: the task refuses it, and the run fails
    dag_run = run_dag("photon_recover", window_end=FUTURE, dry_run=False)

    assert str(dag_run.state) == "failed"
    assert task_states(dag_run)["recover"] == "failed"
    [mail] = sink.messages
    assert mail["To"] == "oncall@example.com" and mail["From"] == "photon@example.com"
    assert "photon_recover failed" in mail["Subject"]
    [html] = [part for part in mail.walk() if part.get_content_type() == "text/html"]
    payload = html.get_payload(decode=True)
    assert isinstance(payload, bytes)
    body = payload.decode("utf-8")
    assert "<code>recover</code>" in body and "RUNBOOK" in body


def test_without_recipients_a_failed_run_only_logs(
    run_dag: RunDag,
    ops_photon: OpsPhoton,
    smtp_sink: tuple[_Sink, int],
    monkeypatch: pytest.MonkeyPatch,
    caplog: pytest.LogCaptureFixture,
) -> None:
    sink, port = smtp_sink
    alerts = AlertSettings(smtp_host="127.0.0.1", smtp_port=port)
    monkeypatch.setenv("AIRFLOW_CONN_PHOTON_SMTP", json.dumps(smtp_connection(alerts)))

    with caplog.at_level("ERROR", logger="plugins.notifications.failure"):
        dag_run = run_dag("photon_recover", window_end=FUTURE, dry_run=False)

    assert str(dag_run.state) == "failed"
    assert sink.messages == []
    assert any("photon.dag_failed dag=photon_recover" in r.getMessage() for r in caplog.records)
