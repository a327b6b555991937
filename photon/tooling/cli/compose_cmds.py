"""``photon compose``: the platform in containers (docker-compose.yml, docs/deploy.md)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer

from photon.tooling.cli.common import exit_on_sigterm, out

compose_app = typer.Typer(
    help="The platform in containers: docker-compose.yml on this machine's Docker engine.",
    no_args_is_help=True,
)


def _repo() -> Path:
    """The checkout whose docker-compose.yml and Dockerfile the images come from."""
    here = Path.cwd()
    if not (here / "docker-compose.yml").is_file() or not (here / "infra" / "docker").is_dir():
        raise typer.BadParameter(
            f"{here} is not a Photon checkout (no docker-compose.yml and infra/docker): "
            "run it from the project's directory"
        )
    return here


@compose_app.command("build")
def compose_build() -> None:
    """Build the stack's images (the base first, made from Debian's packages where no
    registry answers); cached layers cost nothing. Starts `dockerd` where none runs (as
    root) and stops it again. `make test` runs it while the rest of the suite runs."""
    from rich.table import Table

    from photon.tooling.compose.demo import build_images
    from photon.tooling.compose.engine import DockerEngine, image_of

    exit_on_sigterm()  # through the finally: the daemon we started stops
    with tempfile.TemporaryDirectory(prefix="photon-compose-build-") as workdir:
        engine = DockerEngine(_repo(), Path(workdir) / "engine")
        engine.ensure_running()
        try:
            standin, took = build_images(engine)
        finally:
            engine.stop()  # only a daemon this command started
    table = Table("image", "seconds", title="images built")
    for target, seconds in took.items():
        table.add_row(image_of(target), f"{seconds:.0f}")
    out.print(table)
    if standin:
        out.print("MinIO's image cannot be had here: the S3 stand-in takes its place")


@compose_app.command("demo")
def compose_demo(
    queries: Annotated[int, typer.Option(help="Queries to simulate.", min=100)] = 3_000,
    rate: Annotated[float, typer.Option(help="Queries per second, live.", min=1.0)] = 50.0,
    keep: Annotated[
        bool, typer.Option(help="Leave the project running afterwards (its .env is printed).")
    ] = False,
    settle_timeout_s: Annotated[
        float,
        typer.Option(help="Seconds the output may take to settle after the stream.", min=10),
    ] = 900.0,
) -> None:
    """`make demo` on the compose stack: build the images, up, live logs through both DCs'
    pipelines on the Spark cluster, the same audit; down -v. Exit 1 unless exactly once."""
    from photon.tooling.cli.audit_view import print_audit
    from photon.tooling.compose.demo import DemoOptions, run_demo

    options = DemoOptions(queries=queries, rate=rate, settle_timeout_s=settle_timeout_s, keep=keep)
    result = run_demo(
        _repo(), options, say=out.print, show_audit=lambda a, b: print_audit(a, {"apps": []}, b)
    )
    if not result.exactly_once:
        raise typer.Exit(1)
