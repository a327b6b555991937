"""``photon registry ...``: inspect and operate the IdRegistry from a shell.

Every command validates its arguments before it connects, and prints a table
or, with ``--json``, one JSON document.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Annotated

import typer
from rich.table import Table

from photon.settings import PhotonSettings
from photon.tooling.cli.common import JsonOption, err, out, print_json, settings_of
from registry import EventId, IdRegistry, InvalidEventIdError

registry_app = typer.Typer(help="The IdRegistry on the ZooKeeper ensemble.", no_args_is_help=True)
tokens_app = typer.Typer(
    help="Tokens: read, clear after output, delete-if (recovery).", no_args_is_help=True
)
registry_app.add_typer(tokens_app, name="tokens")

IdsArgument = Annotated[list[str], typer.Argument(help="Event ids: <ipv4>:<pid>:<ts_us>.")]


def _ids(values: list[str]) -> list[str]:
    for value in values:
        try:
            EventId.parse(value)
        except InvalidEventIdError as exc:
            raise typer.BadParameter(str(exc), param_hint="IDS") from None
    return values


@contextmanager
def _registry(ctx: typer.Context) -> Iterator[tuple[PhotonSettings, IdRegistry]]:
    from photon.registry_access import connect_registry

    settings = settings_of(ctx)
    reg = connect_registry(settings)
    try:
        yield settings, reg
    finally:
        reg.close()


@registry_app.command("status")
def status(ctx: typer.Context, json_out: JsonOption = False) -> None:
    """Sharding epochs and, per shard, the GC boundary and how many ids it holds."""
    with _registry(ctx) as (settings, reg):
        config = reg.sharding()
        stats = reg.shard_stats()
    data = {
        "root": reg.root,
        "config_version": config.version,
        "bucket_s": config.bucket_us / 1_000_000,
        "epochs": [{"start_us": e.start_us, "shards": e.shards} for e in config.epochs],
        "shards": [
            {
                "shard": s.shard,
                "gc_boundary_us": s.gc_boundary_us,
                "hours": s.hours,
                "buckets": s.buckets,
                "ids": s.ids,
                "largest_bucket": s.largest_bucket,
            }
            for s in stats
        ],
        "ids": sum(s.ids for s in stats),
    }
    if json_out:
        print_json(data)
        return
    out.print(f"registry {reg.root} on {','.join(settings.zk_hosts)} (config v{config.version})")
    epochs = Table("epoch", "starts (us)", "shards")
    for n, e in enumerate(config.epochs):
        epochs.add_row(str(n), str(e.start_us), str(e.shards))
    out.print(epochs)
    shards = Table("shard", "GC boundary (us)", "hours", "buckets", "ids", "largest bucket")
    for s in stats:
        shards.add_row(
            *map(str, (s.shard, s.gc_boundary_us, s.hours, s.buckets, s.ids, s.largest_bucket))
        )
    out.print(shards)


@registry_app.command("lookup")
def lookup(ctx: typer.Context, ids: IdsArgument, json_out: JsonOption = False) -> None:
    """Whether each id is registered: absent, present or too_old."""
    _ids(ids)
    with _registry(ctx) as (_, reg):
        found = reg.lookup(ids)
    _print_results({i: str(r) for i, r in found.items()}, json_out, "lookup")


@registry_app.command("register")
def register(
    ctx: typer.Context,
    ids: IdsArgument,
    token: Annotated[str, typer.Option(help="Token naming the attempt.")] = "",
    json_out: JsonOption = False,
) -> None:
    """Register ids with a token (an operator's repair; pipelines register themselves)."""
    _ids(ids)
    if not token:
        raise typer.BadParameter(
            "give a non-empty --token naming the attempt", param_hint="--token"
        )
    with _registry(ctx) as (_, reg):
        results = reg.register((i, token) for i in ids)
    _print_results({i: str(r) for i, r in results.items()}, json_out, "register")


@registry_app.command("reshard")
def reshard(
    ctx: typer.Context,
    shards: Annotated[int, typer.Option(help="Shard count of the new epoch.", min=1, max=4096)],
    skew_s: Annotated[
        float | None,
        typer.Option(help="Seconds from now until the epoch starts; default: max clock skew."),
    ] = None,
    json_out: JsonOption = False,
) -> None:
    """Append a sharding epoch starting at now + skew (compare-and-set)."""
    from photon.ops.reshard import check_acknowledged

    settings = settings_of(ctx)
    skew = settings.shards.max_clock_skew_s if skew_s is None else skew_s
    if skew < settings.shards.max_clock_skew_s:
        raise typer.BadParameter(
            f"{skew} s is below the configured maximum clock skew "
            f"({settings.shards.max_clock_skew_s} s): ids already in flight could change shard",
            param_hint="--skew-s",
        )
    with _registry(ctx) as (_, reg):
        check_acknowledged(reg)
        config = reg.append_epoch(shards, max_skew_s=skew)
    epoch = config.epochs[-1]
    data = {"config_version": config.version, "start_us": epoch.start_us, "shards": epoch.shards}
    if json_out:
        print_json(data)
    else:
        out.print(
            f"epoch {len(config.epochs) - 1}: {epoch.shards} shards from {epoch.start_us} us "
            f"(config v{config.version})"
        )


@registry_app.command("gc")
def gc(
    ctx: typer.Context,
    shard: Annotated[int | None, typer.Option(help="Only this shard; default all.", min=0)] = None,
    json_out: JsonOption = False,
) -> None:
    """Advance GC boundaries to now - retention (never back) and delete expired buckets."""
    from photon.ops.gc import advance_and_collect

    with _registry(ctx) as (settings, reg):
        count = reg.sharding().max_shards
        if shard is not None and shard >= count:
            raise typer.BadParameter(
                f"shard {shard} does not exist (0..{count - 1})", param_hint="--shard"
            )
        run = advance_and_collect(
            reg, settings.retention, shards=None if shard is None else [shard]
        )
    data = [
        {
            "shard": s.shard,
            "boundary_us": s.boundary_us,
            "deleted_buckets": s.deleted_buckets,
            "deleted_ids": s.deleted_ids,
            "ids_left": s.ids_left,
        }
        for s in run.shards
    ]
    if json_out:
        print_json(data)
        return
    table = Table("shard", "boundary (us)", "deleted buckets", "deleted ids", "ids left")
    for row in data:
        table.add_row(*map(str, row.values()))
    out.print(table)


@tokens_app.command("read")
def tokens_read(ctx: typer.Context, ids: IdsArgument, json_out: JsonOption = False) -> None:
    """The token each id holds ("" once cleared, null when not registered)."""
    _ids(ids)
    with _registry(ctx) as (_, reg):
        tokens = {i: reg.read_token(i) for i in ids}
    _print_results(tokens, json_out, "token")


@tokens_app.command("clear")
def tokens_clear(ctx: typer.Context, ids: IdsArgument, json_out: JsonOption = False) -> None:
    """Clear the tokens of ids confirmed in the output."""
    _ids(ids)
    with _registry(ctx) as (_, reg):
        cleared = reg.clear_tokens(ids)
    if json_out:
        print_json({"cleared": cleared})
    else:
        out.print(f"cleared {cleared} of {len(ids)} tokens")


@tokens_app.command("delete-if")
def tokens_delete_if(
    ctx: typer.Context,
    ids: IdsArgument,
    token: Annotated[str, typer.Option(help="Delete only ids still holding this token.")] = "",
    json_out: JsonOption = False,
) -> None:
    """Delete ids only while they still hold --token (recovery of a dead attempt)."""
    _ids(ids)
    if not token:
        raise typer.BadParameter("give the --token of the dead attempt", param_hint="--token")
    with _registry(ctx) as (_, reg):
        deleted = {i: reg.delete_if_token(i, token) for i in ids}
    _print_results(deleted, json_out, "deleted")


def _print_results(results: Mapping[str, object], json_out: bool, what: str) -> None:
    if json_out:
        print_json(results)
        return
    table = Table("id", what)
    for key, value in results.items():
        table.add_row(key, "-" if value is None else str(value))
    out.print(table)
    if not results:
        err.print("no ids")
