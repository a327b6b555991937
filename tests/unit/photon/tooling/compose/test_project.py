from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from photon.settings import RedisSettings
from photon.tooling.compose.engine import DockerEngine, image_of
from photon.tooling.compose.project import PUBLISHED_PORTS, ComposeProject, ServiceState
from tests.conftest import REPO

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    ("status", "health", "exit_code", "ready"),
    [
        ("running", "healthy", 0, True),
        ("running", "starting", 0, False),
        ("running", "unhealthy", 0, False),
        ("exited", None, 0, True),  # a job that ended well
        ("exited", None, 1, False),  # a job that failed
        ("running", None, 0, False),  # a job still at work
    ],
)
def test_a_service_is_ready_when_healthy_or_a_job_that_ended_well(
    status: str, health: str | None, exit_code: int, ready: bool
) -> None:
    assert ServiceState("s", "id", status, health, exit_code).ready is ready


def test_the_projects_env_has_new_secrets_free_ports_and_the_runs_values_once(
    tmp_path: Path,
) -> None:
    project = ComposeProject(
        DockerEngine(REPO, tmp_path / "engine"),
        "photon-unit",
        tmp_path,
        extra_env={"GEN_QUERIES": "123", "EXTRA_ONLY": "x"},
    )
    env = project.write_env()
    lines = project.env_file.read_text().splitlines()
    keys = [line.partition("=")[0] for line in lines if "=" in line and not line.startswith("#")]
    assert len(keys) == len(set(keys))  # every variable once
    assert env["GEN_QUERIES"] == "123" and env["EXTRA_ONLY"] == "x"
    ports = [int(env[name]) for name in PUBLISHED_PORTS]
    assert len(set(ports)) == len(ports) and 8080 not in ports  # free ports, not defaults
    assert env["ZK_AUTH_PASSWORD"] and env["AIRFLOW_FERNET_KEY"]  # secrets filled
    assert project.env_file.stat().st_mode & 0o077 == 0  # owner-only
    assert project.write_env()["ZK_AUTH_PASSWORD"] != env["ZK_AUTH_PASSWORD"]  # a new run


def test_the_stand_in_override_is_the_second_file_only_when_asked(tmp_path: Path) -> None:
    engine = DockerEngine(REPO, tmp_path)
    assert ComposeProject(engine, "p", tmp_path).files() == [REPO / "docker-compose.yml"]
    with_standin = ComposeProject(engine, "p", tmp_path, s3_standin=True).files()
    assert with_standin[1] == REPO / "infra" / "docker" / "compose.s3-standin.yml"
    assert image_of("services") == "photon/services:0.1.0"


def test_the_compose_caches_cap_is_the_local_stacks() -> None:
    # One cap for both stacks: the sizing in docs/deploy.md holds for either.
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    command = compose["services"]["redis"]["command"]
    cap = command[command.index("--maxmemory") + 1]
    assert cap == f"{RedisSettings().maxmemory_mb}mb"
    assert command[command.index("--maxmemory-policy") + 1] == "allkeys-lru"
