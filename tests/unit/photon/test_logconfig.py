"""Log lines: key=value by default, JSON when PHOTON_LOG_FORMAT says so; bad values refused."""

from __future__ import annotations

import json
from collections.abc import Iterator

import pytest
import structlog

from photon.logconfig import configure_logging

pytestmark = pytest.mark.unit


@pytest.fixture(autouse=True)
def _restore_logging() -> Iterator[None]:
    yield
    configure_logging("info", "console")


def test_json_lines_carry_the_event_its_fields_and_a_timestamp(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("PHOTON_LOG_FORMAT", "json")
    configure_logging("info")
    structlog.get_logger("t").info("joiner.batch", dc="b", wasted=3)
    line = json.loads(capsys.readouterr().err.strip())
    assert line["event"] == "joiner.batch" and line["dc"] == "b" and line["wasted"] == 3
    assert line["level"] == "info" and line["timestamp"].endswith("Z")


def test_console_lines_are_the_default(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("PHOTON_LOG_FORMAT", raising=False)
    configure_logging("info")
    structlog.get_logger("t").info("joiner.batch", wasted=3)
    assert "wasted=3" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("level", "fmt", "says"), [("loud", "json", "level"), ("info", "xml", "format")]
)
def test_a_bad_level_or_format_is_refused(level: str, fmt: str, says: str) -> None:
    with pytest.raises(ValueError, match=says):
        configure_logging(level, fmt)
