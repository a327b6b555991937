"""The Docker engine the compose stack runs on, and the images it needs.

:class:`DockerEngine` finds a running engine or, as root where none runs, starts
``dockerd`` itself (and stops exactly that daemon at the end); it builds the
stack's images from ``infra/docker/Dockerfile`` in their stages' order, and makes
the base ``debian:bookworm-slim`` from Debian's packages where no registry
answers (``infra/docker/build-base-image.sh``).

How it fails: no engine and none can be started (not root, ``dockerd`` not
installed, or it does not answer within ``start_timeout_s``), a build or a
command that exits non-zero: :class:`DockerError` saying which and the tail of
its output.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

import structlog

from photon.errors import PhotonError

log = structlog.get_logger(__name__)

#: The image every built image comes FROM.
BASE_IMAGE = "debian:bookworm-slim"
#: The stack's built images by Dockerfile target, in build order (each stage builds
#: on the ones before it: the classic builder builds every earlier stage anyway).
VERSION = "0.1.0"
TARGETS = ("photon", "services", "airflow", "s3-standin")
#: Where Debian keeps the CAs a machine's admin added.
HOST_CAS = Path("/usr/local/share/ca-certificates")


def image_of(target: str) -> str:
    return f"photon/{target}:{VERSION}"


class DockerError(PhotonError, RuntimeError):
    """The Docker engine cannot be reached or started, or a docker command failed."""


def _tail(text: str, lines: int = 25) -> str:
    return "\n".join(text.strip().splitlines()[-lines:])


@dataclass
class DockerEngine:
    """The engine at the default socket; ``started`` when this process started it."""

    repo: Path
    state_dir: Path
    start_timeout_s: float = 60.0
    started: subprocess.Popen[bytes] | None = field(default=None, init=False)

    # -- the daemon ---------------------------------------------------------------------

    def answers(self) -> bool:
        try:
            result = subprocess.run(
                ["docker", "info", "--format", "{{.ServerVersion}}"],
                capture_output=True,
                timeout=20,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired):
            return False
        return result.returncode == 0

    def ensure_running(self) -> None:
        """Use a running engine, or start ``dockerd`` (as root) and wait for it."""
        if self.answers():
            return
        if shutil.which("docker") is None:
            raise DockerError("docker is not installed: apt-get install docker.io")
        dockerd = shutil.which("dockerd")
        if dockerd is None or os.geteuid() != 0:
            raise DockerError(
                "no Docker engine answers and this process cannot start one "
                + (
                    "(dockerd is not installed: apt-get install docker.io)"
                    if dockerd is None
                    else "(starting dockerd needs root)"
                )
            )
        self.state_dir.mkdir(parents=True, exist_ok=True)
        with (self.state_dir / "dockerd.log").open("ab") as out:
            self.started = subprocess.Popen(  # the engine's own daemon
                [dockerd], stdout=out, stderr=subprocess.STDOUT, start_new_session=True
            )
        log.info("compose.dockerd_started", pid=self.started.pid)
        deadline = time.monotonic() + self.start_timeout_s
        while time.monotonic() < deadline:
            if self.started.poll() is not None:
                raise DockerError(
                    f"dockerd exited with status {self.started.returncode}: "
                    f"{_tail((self.state_dir / 'dockerd.log').read_text(errors='replace'))}"
                )
            if self.answers():
                return
            time.sleep(1)
        self.stop()
        raise DockerError(f"dockerd did not answer within {self.start_timeout_s:.0f} s")

    def stop(self) -> None:
        """Stop the daemon this process started (never one it found running)."""
        if self.started is None:
            return
        self.started.terminate()
        try:
            self.started.wait(timeout=60)
        except subprocess.TimeoutExpired:
            self.started.kill()
            self.started.wait()
        log.info("compose.dockerd_stopped", pid=self.started.pid)
        self.started = None

    # -- images ---------------------------------------------------------------------------

    def has_image(self, image: str) -> bool:
        result = subprocess.run(
            ["docker", "image", "inspect", image], capture_output=True, timeout=30, check=False
        )
        return result.returncode == 0

    def pull(self, image: str, timeout_s: float = 300) -> bool:
        """Pull ``image``; False where no registry answers."""
        try:
            result = subprocess.run(
                ["docker", "pull", "-q", image],
                capture_output=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired:
            return False
        return result.returncode == 0

    def obtain(self, image: str) -> bool:
        """``image`` is here, or pulled; False when neither."""
        return self.has_image(image) or self.pull(image)

    def ensure_base(self) -> None:
        """The base image: present, pulled, or made from Debian's packages."""
        if self.obtain(BASE_IMAGE):
            return
        log.info("compose.base_image", how="debootstrap", image=BASE_IMAGE)
        self.run([str(self.repo / "infra" / "docker" / "build-base-image.sh")], timeout_s=1800)

    def trust_host_cas(self) -> list[str]:
        """Copy the machine's own CAs (``/usr/local/share/ca-certificates/*.crt``: a
        TLS-inspecting proxy's, say) where the build trusts them; their names."""
        target = self.repo / "infra" / "docker" / "ca-certificates"
        for stale in target.glob("*.crt"):
            stale.unlink()
        copied = []
        for cert in sorted(HOST_CAS.glob("*.crt")):
            shutil.copyfile(cert, target / cert.name)
            copied.append(cert.name)
        return copied

    def build(self, targets: tuple[str, ...]) -> dict[str, float]:
        """Build each of ``targets`` (a cached layer costs nothing); seconds per target."""
        cas = self.trust_host_cas()
        if cas:
            log.info("compose.build_trusts", cas=cas)
        took = {}
        for target in TARGETS:
            if target not in targets:
                continue
            began = time.monotonic()
            self.run(
                [
                    "docker",
                    "build",
                    "--target",
                    target,
                    "--tag",
                    image_of(target),
                    "--file",
                    str(self.repo / "infra" / "docker" / "Dockerfile"),
                    str(self.repo),
                ],
                timeout_s=3600,
            )
            took[target] = time.monotonic() - began
            log.info("compose.image_built", image=image_of(target), seconds=round(took[target], 1))
        return took

    def run(self, argv: list[str], *, timeout_s: float = 600) -> str:
        """Run a command; its stdout, or :class:`DockerError` with its output's tail."""
        try:
            result = subprocess.run(
                argv,
                capture_output=True,
                text=True,
                timeout=timeout_s,
                check=False,
            )
        except subprocess.TimeoutExpired as exc:
            raise DockerError(
                f"{' '.join(argv[:4])} … did not end within {timeout_s:.0f} s"
            ) from exc
        if result.returncode != 0:
            raise DockerError(
                f"{' '.join(argv[:4])} … exited with {result.returncode}:\n"
                f"{_tail(result.stdout + result.stderr)}"
            )
        return result.stdout
