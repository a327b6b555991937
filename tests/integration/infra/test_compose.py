"""The compose stack, checked without a Docker engine.

Debian's ``docker-compose`` validates and resolves the file (anchors, merges,
``${VAR}`` interpolation) with a ``.env`` made by ``photon stack compose-env``;
the resolved file is then checked service by service: pinned images, health
checks, commands that the installed ``photon`` and ``airflow`` accept, PHOTON_*
variables that the settings accept, and no secret in the repository.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from photon.settings import load_settings
from photon.tooling.runs import environment
from photon.tooling.stack.compose_env import secret_names
from tests.conftest import REPO

pytestmark = pytest.mark.integration


@pytest.fixture(autouse=True)
def only_the_compose_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    """A container sees its compose variables alone, not the PHOTON_* of the shell here."""
    for name in [k for k in os.environ if k.startswith("PHOTON_")]:
        monkeypatch.delenv(name)


COMPOSE = REPO / "docker-compose.yml"
EXAMPLE = REPO / ".env.example"
BIN = Path(sys.executable).parent
#: Images whose command is a server of its own (not Photon's or Airflow's CLI): MinIO's,
#: and Debian's binaries on the services image.
THIRD_PARTY_COMMANDS = {
    "minio/minio": {"server"},
    "photon/services": {
        "redis-server",
        "prometheus",
        "prometheus-redis-exporter",
        "/opt/photon/infra/docker/postgres.sh",
    },
}
DOCKERFILE = REPO / "infra" / "docker" / "Dockerfile"
STANDIN = REPO / "infra" / "docker" / "compose.s3-standin.yml"
SECRET_NAME = re.compile(r"(PASSWORD|SECRET|SECRET_KEY|FERNET_KEY|TOKEN)$", re.IGNORECASE)


def docker_compose(*args: str) -> subprocess.CompletedProcess[str]:
    binary = shutil.which("docker-compose")
    assert binary, "docker-compose is missing: infra/install-system-deps.sh installs it"
    return subprocess.run(
        [binary, "--project-directory", str(REPO), "-f", str(COMPOSE), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def compose_env(out: Path) -> subprocess.CompletedProcess[str]:
    """`photon stack compose-env`, as a user runs it."""
    return subprocess.run(
        [BIN / "photon", "stack", "compose-env", "--example", str(EXAMPLE), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


@pytest.fixture(scope="module")
def env_file(tmp_path_factory: pytest.TempPathFactory) -> Path:
    path = tmp_path_factory.mktemp("compose") / ".env"
    result = compose_env(path)
    assert result.returncode == 0, result.stderr
    return path


@pytest.fixture(scope="module")
def services(env_file: Path) -> dict[str, dict[str, Any]]:
    result = docker_compose("--env-file", str(env_file), "config")
    assert result.returncode == 0, result.stderr
    resolved: dict[str, Any] = yaml.safe_load(result.stdout)
    return dict(resolved["services"])


def test_config_passes_with_the_generated_env_and_names_the_missing_secrets_without(
    env_file: Path, tmp_path: Path
) -> None:
    assert docker_compose("--env-file", str(env_file), "config", "-q").returncode == 0
    unfilled = docker_compose("--env-file", str(EXAMPLE), "config", "-q")
    assert unfilled.returncode != 0
    assert "photon stack compose-env" in unfilled.stderr


def test_the_stack_has_every_part(services: dict[str, dict[str, Any]]) -> None:
    expected = {"zk1", "zk2", "zk3", "minio", "minio-init", "redis", "spark-master"}
    expected |= {"spark-worker1", "spark-worker2", "postgres", "airflow-init", "generator"}
    expected |= {"prometheus", "grafana", "zk-exporter", "redis-exporter"}
    expected |= {f"airflow-{c}" for c in ("api-server", "scheduler", "dag-processor", "triggerer")}
    expected |= {f"{app}-{dc}" for app in ("query-reader", "joiner") for dc in ("a", "b")}
    assert set(services) == expected


def test_zookeeper_nodes_are_configured_by_the_native_stacks_code(
    services: dict[str, dict[str, Any]], tmp_path: Path
) -> None:
    """Each node runs `photon stack zookeeper-node`, whose zoo.cfg is the native stack's
    (the same snapshot-by-log-size, four-letter words, no AdminServer) with the
    compose hosts on ZooKeeper's default ports."""
    from typer.testing import CliRunner

    from photon.tooling.cli.main import app
    from photon.tooling.stack.zookeeper import SNAP_SIZE_LIMIT_KB, serve_argv

    for n in (1, 2, 3):
        argv = services[f"zk{n}"]["command"]
        assert argv[:3] == ["photon", "stack", "zookeeper-node"]
        options = dict(zip(argv[3::2], argv[4::2], strict=True))
        assert options["--id"] == str(n) and options["--hosts"] == "zk1,zk2,zk3"
        assert services[f"zk{n}"]["image"].startswith("photon/services:")
    java = serve_argv(2, ["zk1", "zk2", "zk3"], tmp_path, 256)
    assert java[0] == "java" and java[-1] == str(tmp_path / "conf" / "zoo.cfg")
    assert "-Dzookeeper.digest.enabled=false" in java  # as the native stack's nodes
    cfg = (tmp_path / "conf" / "zoo.cfg").read_text().splitlines()
    assert f"snapSizeLimitInKb={SNAP_SIZE_LIMIT_KB}" in cfg
    assert {"admin.enableServer=false", "clientPort=2181", "quorumListenOnAllIPs=true"} <= set(cfg)
    assert [line for line in cfg if line.startswith("server.")] == [
        f"server.{i}=zk{i}:2888:3888" for i in (1, 2, 3)
    ]
    assert (tmp_path / "data" / "myid").read_text() == "2\n"
    refused = CliRunner().invoke(app, ["stack", "zookeeper-node", "--id", "4", "--hosts", "a,b,c"])
    assert refused.exit_code == 2 and "not one of 1..3" in refused.output


def _pinned(image: str) -> bool:
    name, _, tag = image.rpartition(":")
    return bool(name) and "/" not in tag and tag != "latest" and bool(re.search(r"\d", tag))


#: The one image the stack's builds start from: a Debian release (docs/deploy.md, "Images").
BASE = "debian:bookworm-slim"


def test_every_image_is_pinned_and_every_build_starts_from_the_debian_release(
    services: dict[str, dict[str, Any]],
) -> None:
    built = set()
    for name, service in services.items():
        assert _pinned(service["image"]), f"{name}: {service['image']}"
        build = service.get("build")
        if build:
            assert Path(build["context"]) / build["dockerfile"] == DOCKERFILE, name
            built.add(build["target"])
    stages = re.findall(r"^FROM\s+(\S+)\s+AS\s+(\S+)", DOCKERFILE.read_text(), re.MULTILINE)
    names = [stage for _, stage in stages]
    for base, stage in stages:  # each from the base or from a stage above it
        assert base == BASE or base in names[: names.index(stage)], (base, stage)
    assert built == {"photon", "services", "airflow"}
    # only MinIO and Grafana keep their upstream images
    upstream = {n for n, s in services.items() if not s["image"].startswith("photon/")}
    assert upstream == {"minio", "minio-init", "grafana"}


def _stage_uids() -> dict[str, int]:
    """Each Dockerfile stage's user id: its last ``USER`` (or its parent's), by the uid
    that ``useradd --uid`` gave that name in it or a stage it is built from."""
    parts = re.split(r"^FROM\s+(\S+)\s+AS\s+(\S+)\s*$", DOCKERFILE.read_text(), flags=re.MULTILINE)
    uids: dict[str, int] = {}  # user name -> uid, as the stages add them
    users: dict[str, str] = {}  # stage -> its user name
    stage_uids: dict[str, int] = {}
    for parent, stage, body in zip(parts[1::3], parts[2::3], parts[3::3], strict=True):
        for uid, name in re.findall(
            r"useradd\b[^\n]*?--uid\s+(\d+)[^\n]*?\s(\w+)\s*(?:\\|&&|$)", body, re.MULTILINE
        ):
            uids[name] = int(uid)
        named = re.findall(r"^USER\s+(\S+)", body, re.MULTILINE)
        users[stage] = named[-1] if named else users.get(parent, "root")
        stage_uids[stage] = uids.get(users[stage], 0)
    return stage_uids


def test_the_services_that_share_a_volume_run_as_one_uid(
    services: dict[str, dict[str, Any]],
) -> None:
    """A named volume is created owned as the first container to mount it has that
    directory; the next container of another uid could not write it."""
    stage_uids = _stage_uids()
    assert stage_uids["photon"] == stage_uids["airflow"] == 10001 and stage_uids["runtime"] == 0
    by_volume: dict[str, dict[str, int]] = {}
    for name, service in services.items():
        build = service.get("build")
        if not build:
            continue
        for mount in service.get("volumes", []):
            source = mount["source"] if isinstance(mount, dict) else mount.split(":")[0]
            if not source.startswith(("/", ".")):
                by_volume.setdefault(source, {})[name] = stage_uids[build["target"]]
    shared = {volume: owners for volume, owners in by_volume.items() if len(owners) > 1}
    assert {"logs-a", "logs-b", "state-a", "state-b"} <= shared.keys()
    for volume, owners in shared.items():
        assert len(set(owners.values())) == 1, f"{volume}: {owners}"


def test_the_clusters_spark_is_the_pinned_pyspark(services: dict[str, dict[str, Any]]) -> None:
    """Master and workers run the image's pip-installed Spark, installed from the lock."""
    pins = dict(
        line.split("==", 1) for line in (REPO / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    )  # fmt: skip
    assert pins["pyspark"] == pins["pyspark-client"]
    assert "--require-hashes -r locks/pipeline.txt" in DOCKERFILE.read_text()
    lock = (REPO / "locks" / "pipeline.txt").read_text()
    assert f"pyspark=={pins['pyspark']} \\" in lock  # the same Spark as the lock's
    for name in ("spark-master", "spark-worker1", "spark-worker2"):
        role = "master" if name == "spark-master" else "worker"
        assert services[name]["build"]["target"] == "photon"
        assert services[name]["command"][:3] == ["photon", "cluster", role]


def test_every_long_running_service_has_a_healthcheck_and_its_dependents_wait_for_it(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, service in services.items():
        if service.get("restart") == "no":  # a job: it runs once and exits
            continue
        assert service.get("healthcheck", {}).get("test"), f"{name} has no healthcheck"
    for name, service in services.items():
        for dependency, rule in service.get("depends_on", {}).items():
            wanted = "service_completed_successfully"
            if services[dependency].get("restart") != "no":
                wanted = "service_healthy"
            assert rule["condition"] == wanted, f"{name} -> {dependency}"


def _commands(service: dict[str, Any]) -> list[list[str]]:
    command = service.get("command")
    if not command:
        return []
    if command[:2] == ["bash", "-c"]:
        return [shlex.split(part) for part in command[2].split("&&")]
    return [list(command)]


#: Checks, in one interpreter, that Airflow's CLI parser accepts each command (argv as JSON
#: on stdin): one Airflow import, not one per command.
_AIRFLOW_PARSES = """
import json, sys
from airflow.cli import cli_parser
for argv in json.load(sys.stdin):
    try:
        cli_parser.get_parser().parse_args([*argv, "--help"])
    except SystemExit as exit:
        if exit.code:
            sys.exit(f"{argv}: exit {exit.code}")
"""


def test_every_command_is_one_the_installed_clis_accept(
    services: dict[str, dict[str, Any]],
) -> None:
    from typer.testing import CliRunner

    from photon.tooling.cli.main import app

    airflow: list[list[str]] = []
    checked = 0
    for name, service in services.items():
        for argv in _commands(service):
            if argv[0] == "photon":
                # --help after every argument: click rejects an unknown command or option first
                result = CliRunner().invoke(app, [*argv[1:], "--help"])
                assert result.exit_code == 0, f"{name}: {argv}: {result.output}"
                checked += 1
            elif argv[0] == "airflow":
                airflow.append(argv[1:])
            else:
                image = service["image"].rpartition(":")[0]
                assert argv[0] in THIRD_PARTY_COMMANDS.get(image, set()), f"{name}: {argv}"
    parsed = subprocess.run(
        [str(BIN / "python"), "-c", _AIRFLOW_PARSES],
        input=json.dumps(airflow),
        capture_output=True,
        text=True,
        timeout=180,
        check=False,
    )
    assert parsed.returncode == 0, parsed.stdout + parsed.stderr[-3000:]
    assert checked + len(airflow) >= 12 and len(airflow) >= 4


def test_every_photon_variable_is_a_setting_with_a_valid_value(
    services: dict[str, dict[str, Any]],
) -> None:
    for name, service in services.items():
        photon_env = {
            k: str(v)
            for k, v in (service.get("environment") or {}).items()
            if k.startswith("PHOTON_")
        }
        if not photon_env:
            continue
        with environment(photon_env):
            settings = load_settings()  # raises SettingsError naming any bad one
        if name.startswith(("joiner-", "query-reader-")):
            app, dc = name.rsplit("-", 1)
            port = settings.metrics_port(dc, app)
            assert f"127.0.0.1:{port}/metrics" in " ".join(service["healthcheck"]["test"]), name
            assert settings.s3.access_key == name  # its own S3 user
            assert settings.pipeline.driver_host == name


def test_no_secret_is_committed() -> None:
    example = EXAMPLE.read_text()
    for line in example.splitlines():
        key, sep, value = line.partition("=")
        if sep and SECRET_NAME.search(key) and not line.startswith("#"):
            assert value == "", f".env.example sets a secret: {key}"
    assert "ZK_AUTH_PASSWORD" in secret_names(example)
    for number, line in enumerate(COMPOSE.read_text().splitlines(), 1):
        key, sep, value = line.strip().partition(":")
        if sep and SECRET_NAME.search(key) and value.strip():
            assert "${" in value, f"docker-compose.yml:{number} sets {key} literally"
        for inline in re.findall(r'"password": "([^"]*)"', line):  # connections' JSON
            assert inline.startswith("${"), f"docker-compose.yml:{number} has a literal password"
    tracked = subprocess.run(
        ["git", "-C", str(REPO), "ls-files", ".env", "*.env"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert tracked.split() == []
    assert ".env" in (REPO / ".gitignore").read_text().splitlines()


def test_compose_env_never_overwrites_an_existing_env(env_file: Path) -> None:
    before = env_file.read_text()
    result = compose_env(env_file)
    assert result.returncode == 2
    assert "exists" in result.stderr
    assert env_file.read_text() == before
    assert env_file.stat().st_mode & 0o077 == 0


def test_prometheus_scrapes_every_app_and_the_dashboard_uses_documented_metrics(
    services: dict[str, dict[str, Any]],
) -> None:
    """Prometheus's targets are the apps' metrics ports; Grafana's panels query only
    metrics docs/metrics.md names (or Prometheus's own ``up``)."""
    config = yaml.safe_load((REPO / "infra" / "prometheus" / "prometheus.yml").read_text())
    jobs = {job["job_name"]: job for job in config["scrape_configs"]}
    targets = {t for c in jobs["photon"]["static_configs"] for t in c["targets"]}
    expected = set()
    for name, service in services.items():
        if name.startswith(("joiner-", "query-reader-")):
            variables = {k: str(v) for k, v in service["environment"].items()}
            with environment({k: v for k, v in variables.items() if k.startswith("PHOTON_")}):
                settings = load_settings()
            app, dc = name.rsplit("-", 1)
            expected.add(f"{name}:{settings.metrics_port(dc, app)}")
            assert settings.pipeline.metrics_bind_address == "0.0.0.0"
    assert targets == expected
    # the registry, the cache and the object store, each through its service's port
    for job, target in {
        "zookeeper": "zk-exporter:9141",
        "redis": "redis-exporter:9121",
        "minio": "minio:9000",
    }.items():
        assert [t for c in jobs[job]["static_configs"] for t in c["targets"]] == [target]
        assert target.partition(":")[0] in services
    assert services["minio"]["environment"]["MINIO_PROMETHEUS_AUTH_TYPE"] == "public"
    documented = set(
        re.findall(r"^\| `(photon_[a-z_]+)`", (REPO / "docs" / "metrics.md").read_text(), re.M)
    )
    dashboard = json.loads((REPO / "infra" / "grafana" / "dashboards" / "photon.json").read_text())
    used = set()
    for panel in dashboard["panels"]:
        for target in panel["targets"]:
            for metric in re.findall(
                r"\b(photon_[a-z_]+?)(?:_bucket|_count|_sum)?\b", target["expr"]
            ):
                used.add(metric)
    assert used and used <= documented, used - documented
    assert len(dashboard["panels"]) >= 10


def test_grafana_is_a_profile_and_the_s3_standin_override_changes_minio_alone(
    env_file: Path, services: dict[str, dict[str, Any]]
) -> None:
    """Grafana (an upstream image) starts only with `--profile grafana`; the override for
    machines without MinIO's image replaces MinIO, its init job and Prometheus's
    config, and Prometheus's config there is the main one without the minio job."""
    assert services["grafana"]["profiles"] == ["grafana"]
    result = docker_compose("--env-file", str(env_file), "-f", str(STANDIN), "config")
    assert result.returncode == 0, result.stderr
    overridden = yaml.safe_load(result.stdout)["services"]

    def same(a: dict[str, Any], b: dict[str, Any]) -> bool:  # a merge may reorder volumes
        return {**a, "volumes": sorted(a.get("volumes", []))} == {
            **b,
            "volumes": sorted(b.get("volumes", [])),
        }

    changed = {n for n in services if not same(overridden[n], services[n])}
    assert changed == {"minio", "minio-init", "prometheus"}
    assert overridden["minio"]["build"]["target"] == "s3-standin"
    assert overridden["minio-init"]["command"][:3] == ["photon", "stack", "s3-standin-init"]
    main = yaml.safe_load((REPO / "infra" / "prometheus" / "prometheus.yml").read_text())
    standin = yaml.safe_load((REPO / "infra" / "docker" / "prometheus.s3-standin.yml").read_text())
    main["scrape_configs"] = [j for j in main["scrape_configs"] if j["job_name"] != "minio"]
    assert standin == main
