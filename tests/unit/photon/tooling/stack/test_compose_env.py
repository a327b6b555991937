"""The compose stack's .env: every empty value of the example becomes a fresh secret."""

from __future__ import annotations

from pathlib import Path

import pytest
from cryptography.fernet import Fernet

from photon.tooling.stack.compose_env import render, secret_names, write

pytestmark = pytest.mark.unit

EXAMPLE = """\
# a comment=stays
ZK_AUTH_USER=photon
ZK_AUTH_PASSWORD=
AIRFLOW_FERNET_KEY=
"""


def test_only_empty_values_are_filled_and_the_rest_is_kept() -> None:
    assert secret_names(EXAMPLE) == ["ZK_AUTH_PASSWORD", "AIRFLOW_FERNET_KEY"]
    rendered = dict(
        line.split("=", 1) for line in render(EXAMPLE).splitlines() if not line.startswith("#")
    )
    assert rendered["ZK_AUTH_USER"] == "photon"
    assert len(rendered["ZK_AUTH_PASSWORD"]) >= 24
    assert all(c.isalnum() or c in "-_" for c in rendered["ZK_AUTH_PASSWORD"])  # URL-safe
    Fernet(rendered["AIRFLOW_FERNET_KEY"].encode())  # a valid key, or this raises
    assert "# a comment=stays" in render(EXAMPLE)


def test_each_rendering_makes_new_secrets() -> None:
    assert render(EXAMPLE) != render(EXAMPLE)


def test_the_env_is_owner_only_and_never_overwritten(tmp_path: Path) -> None:
    example, env = tmp_path / ".env.example", tmp_path / ".env"
    example.write_text(EXAMPLE)
    assert write(example, env) == ["ZK_AUTH_PASSWORD", "AIRFLOW_FERNET_KEY"]
    assert env.stat().st_mode & 0o777 == 0o600
    first = env.read_text()
    with pytest.raises(FileExistsError, match="exists"):
        write(example, env)
    assert env.read_text() == first
