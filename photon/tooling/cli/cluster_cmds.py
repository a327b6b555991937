"""``photon cluster master|worker``: a Spark standalone daemon in the foreground.

What compose's ``spark-master`` and ``spark-worker`` services run (natively,
``photon up --spark-cluster`` starts the same daemons on loopback). The process
becomes Spark's own launcher (``exec``), so signals reach the JVM directly.
"""

from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Annotated

import typer

cluster_app = typer.Typer(
    help="Spark standalone daemons in the foreground (compose's cluster services).",
    no_args_is_help=True,
)

_MASTER_URL = re.compile(r"spark://[A-Za-z0-9.-]+:[0-9]{1,5}")

Host = Annotated[
    str, typer.Option(help="Address or name to bind and advertise (in compose: the service's).")
]
PortOption = Annotated[int, typer.Option(min=1, max=65535, help="RPC port.")]
UiPort = Annotated[int, typer.Option(min=1, max=65535, help="Web UI port (/json/ lists apps).")]


def _exec(argv: list[str], host: str) -> None:
    from photon.tooling.stack.spark import daemon_env

    # Spark binds its RPC port and web UI to SPARK_LOCAL_IP: the one host given.
    os.execve(argv[0], argv, {**os.environ, **daemon_env(host)})  # noqa: S606 (our argv)


@cluster_app.command("master")
def master(host: Host = "127.0.0.1", port: PortOption = 7077, ui_port: UiPort = 8080) -> None:
    """Run a Spark standalone master (the pinned pip-installed Spark)."""
    from photon.tooling.stack.spark import master_argv

    _exec(master_argv(host, port, ui_port), host)


@cluster_app.command("worker")
def worker(
    master_url: Annotated[str, typer.Argument(help="The master, spark://HOST:PORT.")],
    host: Host = "127.0.0.1",
    port: PortOption = 7078,
    ui_port: UiPort = 8081,
    cores: Annotated[int, typer.Option(min=1, max=1024, help="Cores to offer.")] = 4,
    memory_mb: Annotated[int, typer.Option(min=512, help="Memory to offer, MiB.")] = 4096,
    work_dir: Annotated[Path, typer.Option(help="Where executors run (their files, logs).")] = Path(
        ".photon/spark-work"
    ),
) -> None:
    """Run a Spark standalone worker of ``MASTER_URL``."""
    if not _MASTER_URL.fullmatch(master_url):
        raise typer.BadParameter(
            f"{master_url!r} is not spark://HOST:PORT", param_hint="MASTER_URL"
        )
    from photon.tooling.stack.spark import worker_argv

    work_dir.mkdir(parents=True, exist_ok=True)
    argv = worker_argv(
        master_url, host=host, port=port, ui_port=ui_port, cores=cores,
        memory_mb=memory_mb, work_dir=work_dir.resolve(),
    )  # fmt: skip
    _exec(argv, host)
