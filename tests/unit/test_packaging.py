"""Installs by role: a joiner's install (the base, `[pipeline]`) carries no Airflow, Great
Expectations, charts or test tools, and what it runs never imports them."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

REPO = Path(__file__).resolve().parents[2]
PROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]

#: What only the other roles need: none of it may be imported by a DC's apps.
OTHER_ROLES = ("airflow", "great_expectations", "matplotlib", "moto", "minio", "pytest")

#: Imports everything a DC's processes import (the CLI, both apps, the Spark tasks),
#: with the other roles' packages made unimportable.
_IMPORTS_WITHOUT = """
import importlib, sys
from importlib.abc import MetaPathFinder

class Refuse(MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {blocked}:
            raise ModuleNotFoundError(f"{{name}} imported by the pipeline", name=name)
        return None

sys.meta_path.insert(0, Refuse())
for module in {modules}:
    importlib.import_module(module)
from typer.testing import CliRunner
from photon.tooling.cli.main import app
for argv in (["--help"], ["run", "--help"], ["status", "--help"], ["gen", "--help"]):
    result = CliRunner().invoke(app, argv)
    assert result.exit_code == 0, (argv, result.output, result.exception)
"""

PIPELINE_MODULES = [
    "photon.tooling.cli.main",
    "spark_apps.app",
    "spark_apps.dc_pipeline",
    "spark_apps.joiner",
    "spark_apps.query_reader",
    "spark_apps.join_tasks",
    "spark_apps.growing_log_source",
    "photon.tooling.observe.zookeeper_exporter",
    "photon.tooling.observe.status",
    "registry",
]


def _name(requirement: str) -> str:
    return re.split(r"[\[<>=!~; ]", requirement, maxsplit=1)[0].lower().replace("_", "-")


def test_the_base_is_the_pipeline_and_each_other_role_is_an_extra() -> None:
    base = {_name(r) for r in PROJECT["dependencies"]}
    extras = {k: {_name(r) for r in v} for k, v in PROJECT["optional-dependencies"].items()}
    assert {"pyspark", "pyspark-client", "kazoo", "redis", "boto3"} <= base
    for role in ("apache-airflow", "great-expectations", "matplotlib", "moto", "minio", "pytest"):
        assert role not in base, role
    assert extras["pipeline"] == set()
    assert {"apache-airflow", "apache-airflow-providers-apache-spark"} <= extras["airflow"]
    assert "great-expectations" in extras["verify"] and "moto" in extras["stack"]
    assert {"minio", "pytest"} <= extras["dev"]  # test-only packages
    dev = PROJECT["optional-dependencies"]["dev"]
    assert "photon-streams[pipeline,airflow,verify,stack]" in dev  # make installs every role
    stages = image_stages()
    assert "--require-hashes -r /opt/photon/locks/airflow.txt" in stages["airflow"]
    assert "--require-hashes -r locks/stack.txt" in stages["s3-standin"]
    for name in ("photon", "services", "airflow", "s3-standin"):
        assert "--no-deps /opt/photon" in stages[name]  # the project adds nothing to its lock
    assert "--require-hashes -r locks/pipeline.txt" in stages["pipeline-deps"]
    for package in ("zookeeper", "redis-server", "postgresql", "prometheus-redis-exporter"):
        assert package in stages["services"]  # Debian's, the binaries `photon up` runs


def image_stages() -> dict[str, str]:
    """infra/docker/Dockerfile's stages by name: each ``FROM ... AS name`` to the next."""
    text = (REPO / "infra" / "docker" / "Dockerfile").read_text()
    parts = re.split(r"^FROM\s+\S+\s+AS\s+(\S+)\s*$", text, flags=re.MULTILINE)
    return dict(zip(parts[1::2], parts[2::2], strict=True))


def test_a_dcs_apps_and_the_cli_import_nothing_of_the_other_roles() -> None:
    script = _IMPORTS_WITHOUT.format(blocked=set(OTHER_ROLES), modules=PIPELINE_MODULES)
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode == 0, result.stderr[-3000:]


def test_the_refusal_would_catch_an_import() -> None:
    """The check above can fail: a module that imports Airflow is refused."""
    script = _IMPORTS_WITHOUT.format(blocked=set(OTHER_ROLES), modules=["plugins.hooks.registry"])
    result = subprocess.run(
        [sys.executable, "-c", script], cwd=REPO, capture_output=True, text=True, timeout=120
    )
    assert result.returncode != 0 and "airflow imported by the pipeline" in result.stderr


def test_a_command_needing_a_missing_extra_names_the_extra() -> None:
    from photon.extras import MissingExtraError, require

    require("pyarrow", "pipeline", "reading output")  # installed: nothing happens
    with pytest.raises(MissingExtraError, match=r"pip install 'photon-streams\[verify\]'"):
        require("no_such_package_here", "verify", "drawing the report's figures")


def _lock(name: str) -> dict[str, str]:
    """name -> version of a hashed lock file, each entry checked to carry a hash."""
    text = (REPO / "locks" / f"{name}.txt").read_text()
    entries = re.split(r"\n(?=[A-Za-z0-9])", text.split("\n", 2)[2].strip())
    pins = {}
    for entry in entries:
        requirement, _, marker = entry.split(" \\", 1)[0].partition(" ; ")
        assert "--hash=sha256:" in entry, f"locks/{name}.txt: {requirement} has no hash"
        package, version = requirement.split("==")
        package = package.split("[", 1)[0]  # extras kept: see the test below
        if not marker:  # one for another Python (3.11.0-3.11.2) is pinned here alone
            pins[_normal(package)] = version
    return pins


def test_a_package_locked_with_extras_is_locked_without_them_too() -> None:
    # pip's hash-checking mode (the images' pip) takes a dependency's `uvicorn[standard]`
    # and another's `uvicorn` as two requirements: one the lock did not pin by name was
    # unpinned, pip tried the index's newest uvicorn and refused the Airflow image's install.
    for name in ("pipeline", "airflow", "stack", "dev"):
        text = (REPO / "locks" / f"{name}.txt").read_text()
        pinned = dict(re.findall(r"^([A-Za-z0-9][\w.\[\],-]*)==(\S+) ", text, re.M))
        for requirement, version in pinned.items():
            if "[" in requirement:
                assert pinned.get(requirement.split("[")[0]) == version, (name, requirement)
    airflow = (REPO / "locks" / "airflow.txt").read_text()
    assert re.search(r"^uvicorn\[standard\]==", airflow, re.M)
    assert re.search(r"^uvicorn==", airflow, re.M)
    makefile = (REPO / "Makefile").read_text()
    assert "--no-strip-extras" in makefile and "infra/lock_with_extras.py" in makefile


def _normal(package: str) -> str:
    return re.sub(r"[-_.]+", "-", package).lower()  # PEP 503


#: Packages only the images' Python needs (Debian bookworm's 3.11.2; the development
#: environment's is newer): redis wants async-timeout below 3.11.3.
IMAGE_PYTHON_ONLY = {"async-timeout"}


def test_each_roles_hashed_lock_has_the_constraints_versions_and_only_its_role() -> None:
    constraints = {
        _normal(line.split("==")[0]): line.split("==")[1]
        for line in (REPO / "constraints.txt").read_text().splitlines()
        if "==" in line and not line.startswith("#")
    }
    locks = {name: _lock(name) for name in ("pipeline", "airflow", "stack", "dev")}
    for name, pins in locks.items():
        differing = {
            p: v for p, v in pins.items() if constraints.get(p) != v and p not in IMAGE_PYTHON_ONLY
        }
        assert not differing, (name, differing)
    assert set(locks["dev"]) == set(constraints)  # make's install: the whole environment
    assert locks["pipeline"]["pyspark"] == locks["pipeline"]["pyspark-client"]
    for package in ("apache-airflow", "great-expectations", "matplotlib", "moto", "pytest"):
        assert package not in locks["pipeline"], package
    assert {"apache-airflow", "great-expectations"} <= set(locks["airflow"])
    # the S3 stand-in's image: the pipeline's lock and moto's server, nothing of Airflow
    assert set(locks["pipeline"]) < set(locks["stack"]) and "moto" in locks["stack"]
    assert "apache-airflow" not in locks["stack"]
    makefile = (REPO / "Makefile").read_text()
    assert "--require-hashes -r locks/dev.txt" in makefile
