"""The demo on the container stack (``photon compose demo``, ``make compose-demo``).

The same run as ``make demo``, on ``docker-compose.yml``: build what is missing,
``docker-compose up``, wait for every healthcheck, let the generator write both
DCs' logs live while both DCs' query readers and joiners (Spark applications on
the compose cluster) join them, then audit the output in the object store as
``make demo`` does — the same table, the same verdict — and take the project down
with its volumes. A Docker engine is started where none runs (as root) and
stopped again.

How it fails: an image that does not build, a service that is not healthy or a
job that fails (:class:`~photon.tooling.compose.engine.DockerError` with its
logs); output that is not exactly once by the deadline: the audit says what is
missing or duplicated and the run exits 1. The project is taken down either way
(unless asked to keep it).
"""

from __future__ import annotations

import shutil
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import structlog

from photon.settings import PhotonSettings, load_settings
from photon.storage import ObjectStore
from photon.tooling.audit import Audit, audit
from photon.tooling.compose.engine import TARGETS, DockerEngine, image_of
from photon.tooling.compose.project import MINIO_IMAGE, ComposeProject
from photon.tooling.gen.model import MANIFEST_FILE, Manifest
from photon.tooling.gen.simulator import load_manifest
from photon.tooling.runs import environment

log = structlog.get_logger(__name__)

#: Each DC's Spark applications, a container each.
APPS = ("query-reader-a", "joiner-a", "query-reader-b", "joiner-b")


@dataclass(frozen=True)
class DemoOptions:
    queries: int = 3_000
    rate: float = 50.0
    #: How long the output may take to settle once the generator has ended.
    settle_timeout_s: float = 900.0
    keep: bool = False
    name: str = "photon-demo"


def plan_images(engine: DockerEngine) -> tuple[bool, tuple[str, ...]]:
    """Whether MinIO's place goes to the S3 stand-in (its image cannot be had), and
    the targets to build."""
    standin = not engine.obtain(MINIO_IMAGE)
    targets = tuple(t for t in TARGETS if t != "s3-standin" or standin)
    return standin, targets


def build_images(engine: DockerEngine) -> tuple[bool, dict[str, float]]:
    """The base (pulled, or made from Debian's packages), then every image the stack
    builds: whether the S3 stand-in takes MinIO's place, and seconds per image."""
    engine.ensure_base()
    standin, targets = plan_images(engine)
    return standin, engine.build(targets)


def project_settings(project: ComposeProject) -> PhotonSettings:
    """Settings that reach the project's object store from the host, as the verifier
    (it reads everything): MinIO's API is published on the host's loopback."""
    env = project.env()
    values = {
        "PHOTON_S3__ENDPOINT_URL": f"http://127.0.0.1:{env['MINIO_PORT']}",
        "PHOTON_S3__BUCKET": "photon",
        "PHOTON_S3__ACCESS_KEY": env["S3_VERIFIER_ACCESS_KEY"],
        "PHOTON_S3__SECRET_KEY": env["S3_VERIFIER_SECRET_KEY"],
        "PHOTON_DCS": "a,b",
    }
    with environment(values):
        return load_settings()


def settled_audit(
    store: ObjectStore,
    manifest: Manifest,
    timeout_s: float,
    on_audit: Callable[[Audit], None] | None = None,
    poll_s: float = 10.0,
) -> Audit:
    """Audit until the output is exactly once, a duplicate shows (it never goes
    away), or ``timeout_s`` passes; the last audit."""
    deadline = time.monotonic() + timeout_s
    while True:
        result = audit(store, manifest)
        if on_audit is not None:
            on_audit(result)
        if result.exactly_once or result.duplicates or time.monotonic() > deadline:
            return result
        time.sleep(poll_s)


@contextmanager
def running_project(project: ComposeProject, keep: bool) -> Iterator[ComposeProject]:
    """The project up; down with its volumes afterwards (unless ``keep``)."""
    try:
        project.up(without=("generator",))
        yield project
    finally:
        if not keep:
            project.down()


def run_demo(
    repo: Path,
    options: DemoOptions,
    say: Callable[[str], None],
    show_audit: Callable[[Audit, str], None],
) -> Audit:
    workdir = Path(tempfile.mkdtemp(prefix="photon-compose-"))
    engine = DockerEngine(repo, workdir / "engine")
    began = time.monotonic()
    engine.ensure_running()
    try:
        say("1. images: the base, then Photon's (cached layers cost nothing)")
        standin, took = build_images(engine)
        if standin:
            say(f"   {MINIO_IMAGE} cannot be had here: the S3 stand-in takes MinIO's place")
        for target, seconds in took.items():
            say(f"   {image_of(target)}: {seconds:.0f} s")
        project = ComposeProject(
            engine,
            options.name,
            workdir,
            s3_standin=standin,
            extra_env={"GEN_QUERIES": str(options.queries), "GEN_RATE": str(options.rate)},
        )
        project.write_env()
        say(f"2. docker-compose up ({options.name}); waiting for every healthcheck")
        with running_project(project, options.keep):
            # every service healthy, every job ended well (the generator is not started yet)
            project.wait_ready(set(project.services()) - {"generator"})
            project.start("generator")
            say(
                f"3. the generator writes {options.queries} queries at {options.rate}/s into "
                "both DCs' logs; both DCs join them on the Spark cluster"
            )
            project.wait_ready({"generator"}, timeout_s=options.queries / options.rate + 600)
            project.copy_out("generator", f"/data/logs/{MANIFEST_FILE}", workdir / MANIFEST_FILE)
            manifest = load_manifest(workdir)
            say("4. audit the output against the generator's manifest")
            store = ObjectStore.from_settings(project_settings(project))
            result = settled_audit(
                store,
                manifest,
                options.settle_timeout_s,
                on_audit=lambda a: log.info(
                    "compose.audit", joined=a.joined, missing=a.missing, duplicates=a.duplicates
                ),
            )
            show_audit(result, "photon")
            if options.keep:
                say(f"5. kept: project {options.name}, its .env {project.env_file}")
            else:
                say("5. docker-compose down -v")
        say(f"took {time.monotonic() - began:.0f} s")
        return result
    finally:
        if not options.keep:
            engine.stop()  # only a daemon this run started
            shutil.rmtree(workdir, ignore_errors=True)  # its .env holds the run's secrets
