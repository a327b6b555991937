"""Suite-wide rules and fixtures.

Every test carries exactly one of the markers ``unit``, ``integration`` or
``e2e`` (set ``pytestmark`` in the module); collection fails on an unmarked
test. Servers are started by fixtures on free loopback ports, in temporary
directories, and stopped by them: the suite never touches a process it did
not start.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings as hypothesis_settings

from photon.settings import PORT_SLICE_ENV_VAR, PhotonSettings, load_settings
from photon.tooling.runs import environment
from photon.tooling.stack.manager import LocalStack
from photon.tooling.stack.ports import free_ports
from tests.watchdog import EXIT_LIMIT_S, GRACE_S, Watchdog, limit_of

KINDS = ("unit", "integration", "e2e")
REPO = Path(__file__).resolve().parent.parent


_AIRFLOW_HOME = pytest.StashKey[Path]()
_WATCHDOG = pytest.StashKey[Watchdog]()

# Property tests assert behaviour, not speed: Hypothesis' 200 ms deadline failed an
# example whose first call loaded pandas on a loaded two-core machine (2 s).
hypothesis_settings.register_profile("photon", deadline=None)
hypothesis_settings.load_profile("photon")


def pytest_configure(config: pytest.Config) -> None:
    """Airflow, for every test that loads it, in a private home: SQLite, our DAGs only.

    Set before anything imports Airflow (it reads its configuration at import).
    """
    # The real stderr, before pytest captures it: where a watchdog's report must go.
    config.stash[_WATCHDOG] = Watchdog(os.fdopen(os.dup(2), "w", encoding="utf-8"))
    home = Path(tempfile.mkdtemp(prefix="photon-airflow-"))
    (home / "plugins").mkdir()
    config.stash[_AIRFLOW_HOME] = home
    os.environ.update(
        {
            "AIRFLOW_HOME": str(home),
            "AIRFLOW__DATABASE__SQL_ALCHEMY_CONN": f"sqlite:///{home}/airflow.db",
            "AIRFLOW__CORE__LOAD_EXAMPLES": "False",
            "AIRFLOW__CORE__DAGS_FOLDER": str(REPO / "dags"),
            "AIRFLOW__CORE__PLUGINS_FOLDER": str(home / "plugins"),
            "AIRFLOW__CORE__DAGS_ARE_PAUSED_AT_CREATION": "False",
            "GX_ANALYTICS_ENABLED": "false",
        }
    )
    # Each xdist worker picks its test stacks' ports from a slice of its own: a port
    # one worker picked is not taken by another's stack before its own starts.
    worker = os.environ.get("PYTEST_XDIST_WORKER", "")
    if worker.startswith("gw"):
        os.environ[PORT_SLICE_ENV_VAR] = f"{worker[2:]}/{os.environ['PYTEST_XDIST_WORKER_COUNT']}"


def pytest_unconfigure(config: pytest.Config) -> None:
    """The private Airflow home goes with the session that made it."""
    home = config.stash.get(_AIRFLOW_HOME, None)
    if home is not None:
        shutil.rmtree(home, ignore_errors=True)
    # A worker that ran Spark in-process closes py4j's connections as it exits, and
    # py4j logs each at INFO to the handler Airflow's dag.test() set on the root
    # logger: its stream, pytest's capture, is closed by then ("--- Logging error ---"
    # in the suite's output, once a connection).
    logging.getLogger("py4j").setLevel(logging.WARNING)
    # A thread or server left running would keep the worker, and so the run, from ending.
    watchdog = config.stash.get(_WATCHDOG, None)
    if watchdog is not None:
        watchdog.arm("the worker's exit", EXIT_LIMIT_S)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> Iterator[None]:
    """Every test bounded by a thread as well as by its own timeout (tests/watchdog.py)."""
    watchdog = item.config.stash.get(_WATCHDOG, None)
    if watchdog is not None:
        watchdog.arm(item.nodeid, limit_of(item) + GRACE_S)
    try:
        yield
    finally:
        if watchdog is not None:
            watchdog.disarm()


#: `make test` runs the suite in three pytest-xdist workers on two cores (``-n 3``: each
#: long test waits part of its time, on Spark start-ups, DAG runs or holds, and a third
#: worker fills those waits). The end-to-end tests that run whole Spark pipelines form
#: one group, run one after another in one worker, while the others take the Airflow UI,
#: the chaos run and everything else. A module whose fixtures are module-scoped (a server
#: started once for the module) is a group of its own, so that its server starts once.
#: Keys are node-id prefixes; a test in no group is a unit of its own.
XDIST_GROUPS = {
    "tests/e2e/test_cluster.py": "spark-pipelines",
    "tests/e2e/test_photon_command.py::test_demo": "spark-pipelines",
    "tests/e2e/test_pipelines.py": "spark-pipelines",
    "tests/e2e/test_airflow_ui.py": "airflow-ui",
    "tests/integration/spark_apps/": "spark-apps",  # one Spark session (their conftest)
    "tests/integration/photon/security/test_s3_access.py": "s3-access",
    "tests/integration/infra/test_compose.py": "compose",
}


def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """xdist's scope scheduling, with the scopes above (its own ``xdist_group``
    marker does not reach the scheduler under this pytest)."""
    from xdist.scheduler import LoadScopeScheduling

    class GroupScheduling(LoadScopeScheduling):  # type: ignore[misc]
        def _split_scope(self, nodeid: str) -> str:
            for prefix, group in XDIST_GROUPS.items():
                if nodeid.startswith(prefix):
                    return group
            return nodeid

    # In collection order (e2e first: the long group starts at once), not by size.
    config.option.loadscopereorder = False
    return GroupScheduling(config, log)


#: Scheduled first, in this order (xdist hands each worker the next unit as it runs
#: low): the longest units start at once, one a worker: the Spark-pipeline group, the
#: UI, the chaos run; the many short tests fill in behind and even the workers out. A
#: long unit left for last kept one worker busy for minutes while the others idled.
SCHEDULE_FIRST = (
    "tests/e2e/test_cluster.py",
    "tests/e2e/test_photon_command.py::test_demo",
    "tests/e2e/test_pipelines.py",
    "tests/e2e/test_airflow_ui.py",
    "tests/e2e/test_chaos.py",
    "tests/e2e/test_status.py",
    "tests/e2e/test_alerts.py",
)


def _schedule_rank(item: pytest.Item) -> int:
    return next(
        (n for n, prefix in enumerate(SCHEDULE_FIRST) if item.nodeid.startswith(prefix)),
        len(SCHEDULE_FIRST),
    )


#: An end-to-end test runs whole Spark pipelines, Airflow or a browser; on a loaded
#: 2-core machine (the other xdist workers busy) one can take several minutes.
E2E_TIMEOUT_S = 900


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    items.sort(key=_schedule_rank)  # stable: the rest keep their order
    problems = []
    for item in items:
        if item.get_closest_marker("e2e") and not item.get_closest_marker("timeout"):
            item.add_marker(pytest.mark.timeout(E2E_TIMEOUT_S))
        kinds = {m.name for m in item.iter_markers() if m.name in KINDS}
        if len(kinds) != 1:
            problems.append(f"{item.nodeid}: {sorted(kinds) or 'no kind'}")
    if problems:
        raise pytest.UsageError(
            "every test needs exactly one of the markers "
            + ", ".join(KINDS)
            + ":\n  "
            + "\n  ".join(problems)
        )


def stack_env(tmp: Path) -> dict[str, str]:
    """PHOTON_* variables for a private stack on free loopback ports under ``tmp``."""
    ports = free_ports(14)
    return {
        "PHOTON_STACK__STATE_DIR": str(tmp / "state"),
        "PHOTON_LOGS_ROOT": str(tmp / "logs"),
        "PHOTON_STACK__ZK_CLIENT_PORTS": ",".join(map(str, ports[0:3])),
        "PHOTON_STACK__ZK_QUORUM_PORTS": ",".join(map(str, ports[3:6])),
        "PHOTON_STACK__ZK_ELECTION_PORTS": ",".join(map(str, ports[6:9])),
        "PHOTON_STACK__REDIS_PORT": str(ports[9]),
        "PHOTON_STACK__S3_PORT": str(ports[10]),
        "PHOTON_STACK__PROMETHEUS_PORT": str(ports[11]),
        "PHOTON_STACK__REDIS_EXPORTER_PORT": str(ports[12]),
        "PHOTON_STACK__ZK_EXPORTER_PORT": str(ports[13]),
        "PHOTON_STACK__ZK_HEAP_MB": "128",
        # Pipelines started by tests serve no metrics unless a test asks (fixed ports clash).
        "PHOTON_PIPELINE__METRICS_BASE_PORT": "0",
        # Generated logs stop growing at once: let idle files go after 5 s, not 30.
        "PHOTON_PIPELINE__QUERY_FILE_IDLE_S": "5",
    }


def settings_from_env(env: dict[str, str]) -> PhotonSettings:
    with environment(env):
        return load_settings()


@pytest.fixture(scope="session")
def stack_environment(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """The PHOTON_* variables of the session's shared stack (for commands run in tests)."""
    return stack_env(tmp_path_factory.mktemp("stack"))


@pytest.fixture(scope="session")
def stack_settings(stack_environment: dict[str, str]) -> PhotonSettings:
    return settings_from_env(stack_environment)


@pytest.fixture(scope="session")
def local_stack(stack_settings: PhotonSettings) -> Iterator[LocalStack]:
    """One real stack (3-node ZooKeeper, Redis, S3) shared by the integration tests."""
    stack = LocalStack(stack_settings)
    stack.up()
    try:
        yield stack
    finally:
        stack.down(purge=True)


@pytest.fixture(scope="session")
def airflow_db() -> None:
    """``airflow db migrate`` once per session (the home is set in pytest_configure)."""
    airflow = Path(sys.executable).parent / "airflow"
    subprocess.run([str(airflow), "db", "migrate"], check=True, capture_output=True, timeout=300)


RunDag = Callable[..., Any]


@pytest.fixture(scope="session")
def one_execution_api() -> Iterator[None]:
    """One in-process Execution API for every ``dag.test()`` task of the session.

    Airflow builds a new one for each task it runs in-process: its versioned routes are
    generated anew (about 2 CPU-seconds) and its event-loop thread is left running.
    The API answers every task alike; only its DAG bag is set per run, by Airflow.
    """
    from airflow.sdk.execution_time import supervisor

    # Airflow's factory is untyped; it is called once, through a typed name.
    make_api: Callable[[], Any] = supervisor.in_process_api_server
    api = make_api()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(supervisor, "in_process_api_server", lambda: api)
        yield


@pytest.fixture
def run_dag(airflow_db: None, one_execution_api: None) -> RunDag:
    """``dag.test()`` of one of our DAGs (loaded through a DagBag, as Airflow loads it)."""

    def run(dag_id: str, **conf: Any) -> Any:
        from airflow.models.dagbag import DagBag

        bag = DagBag(include_examples=False)
        assert bag.import_errors == {}
        return bag.get_dag(dag_id).test(run_conf=conf or None)

    return run
