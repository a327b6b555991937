"""``photon bench ...``: benchmarks that print figures (speed goals live here, not in tests)."""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from photon.tooling.cli.common import JsonOption, out, print_json, settings_of, working

bench_app = typer.Typer(help="Benchmarks on the running local stack.", no_args_is_help=True)


@bench_app.command("registry")
def bench_registry(
    ctx: typer.Context,
    batches: Annotated[int, typer.Option(help="Batches per batch size.", min=3, max=1000)] = 30,
    unbatched: Annotated[int, typer.Option(help="Single-id register calls.", min=10)] = 300,
    json_out: JsonOption = False,
) -> None:
    """IdRegistry throughput: unbatched vs batched vs raw kazoo multi, and lookups."""
    from photon.tooling.bench import registry as registry_bench

    settings = settings_of(ctx)
    with working("benchmarking the IdRegistry...") as status:
        result = registry_bench.run(
            settings,
            batches=batches,
            unbatched=unbatched,
            on_step=lambda text: status.update(f"benchmarking the IdRegistry: {text}"),
        )
    data = result.to_dict()
    if json_out:
        print_json(data)
        return
    out.print(
        f"unbatched: {data['unbatched_ids_per_s']} ids/s; lookup: {data['lookup_ids_per_s']} ids/s"
    )
    table = Table(
        "batch",
        "API ids/s",
        "txn/s",
        "p50 ms",
        "p99 ms",
        "raw multi ids/s",
        "ZooKeeper CPU-s / 1,000 ids",
        "client CPU-s / 1,000 ids",
    )
    for size, row in data["batched"].items():
        raw = data["raw_multi"][size]["ids_per_s"]
        ensemble = data["ensemble_cpu_s_per_1000_ids"][size]
        table.add_row(
            size,
            str(row["ids_per_s"]),
            str(row["txn_per_s"]),
            str(row["p50_ms"]),
            str(row["p99_ms"]),
            str(raw),
            "not the local stack's" if ensemble is None else f"{ensemble:.4f}",
            f"{data['client_cpu_s_per_1000_ids'][size]:.4f}",
        )
    out.print(table)
    out.print(
        f"batched@1000 = {data['batched_1000_vs_unbatched']}x unbatched (target 25x), "
        f"{data['batched_1000_share_of_raw']:.0%} of raw multi (target 50%)"
    )


@bench_app.command("pipeline")
def bench_pipeline(
    ctx: typer.Context,
    queries: Annotated[
        int, typer.Option(help="Queries of the burst (throughput) workload.", min=1000)
    ] = 150_000,
    click_rate: Annotated[
        float, typer.Option(help="Clicks per second of the live (latency) phase.", min=1.0)
    ] = 1_000.0,
    live_seconds: Annotated[
        float, typer.Option(help="How long the live phase writes.", min=5.0)
    ] = 60.0,
    scaling_queries: Annotated[
        int, typer.Option(help="Queries of the 1- and 2-core joiner runs.", min=1000)
    ] = 300_000,
    scaling_rounds: Annotated[
        int,
        typer.Option(
            help="Rounds of the scaling phase (a 1- and a 2-core run each); its figures "
            "are the rounds' medians.",
            min=1,
            max=16,
        ),
    ] = 8,  # photon.tooling.bench.pipeline.SCALING_ROUNDS (not imported: the CLI starts light)
    knee_rates: Annotated[
        str,
        typer.Option(
            help="Higher click rates tried, in order, until p90 passes 5 s (comma-separated).",
            callback=lambda v: _rates(v),
        ),
    ] = "2000,4000",
    scaling_only: Annotated[
        bool,
        typer.Option(
            help="Only the scaling phase (the joiner alone at 1 and 2 cores, in rounds): "
            "about 3 minutes a round."
        ),
    ] = False,
    json_out: JsonOption = False,
) -> None:
    """Both DC pipelines: the joiner's 1->2 core speed-up against the machine's ceiling,
    serial share and CPU per 1,000 joined clicks, latency at a fixed rate (end to end and
    from availability), the knee (highest rate with p90 <= 5 s), cache, waste."""
    from photon.tooling.bench import pipeline as pipeline_bench

    settings_of(ctx)  # validates the settings; each phase sets its own roots and bucket
    with working("benchmarking the pipelines...") as status:

        def step(text: str) -> None:
            status.update(f"benchmarking the pipelines: {text}")

        if scaling_only:
            with tempfile.TemporaryDirectory(prefix="photon-bench-") as tmp:
                scaling = pipeline_bench.run_scaling(
                    Path(tmp), scaling_queries, step, scaling_rounds
                )
            data = {"scaling": scaling, "targets": pipeline_bench.scaling_targets(scaling)}
        else:
            data = pipeline_bench.run(
                burst_queries=queries,
                click_rate=click_rate,
                live_seconds=live_seconds,
                scaling_queries=scaling_queries,
                scaling_rounds=scaling_rounds,
                knee_rates=[float(r) for r in knee_rates.split(",")],
                on_step=step,
            )
    if json_out:
        print_json(data)
        return
    table = Table(
        "figure", "value", "target met",
        caption="scaling: the median of the rounds, then each round's value",
    )  # fmt: skip
    targets = data["targets"]
    scaling = data["scaling"]

    def row(label: str, value: object, target: str | None = None) -> None:
        table.add_row(label, "-" if value is None else str(value),
                      "" if target is None else str(targets[target]))  # fmt: skip

    def spread(median: object, values: list[object]) -> str:
        """A median and the rounds' values it comes from."""
        return f"{median} ({', '.join(str(v) for v in values)})"

    for cores, at in ((1, scaling["at_1_core"]), (2, scaling["at_2_cores"])):
        label = f"joiner alone, {cores} core(s)"

        def figure(key: str, at: dict[str, object] = at, cores: int = cores) -> str:
            return spread(at[key], [r[key] for r in scaling["runs"] if r["cores"] == cores])

        row(f"{label}: joined clicks/s", figure("joined_per_s"))
        row(f"{label}: CPU-s per 1,000 joined", figure("cpu_s_per_1000_joined"))
        row(f"{label}: tasks running at once (mean)", figure("tasks_running"))
        row(f"{label}: serial share (no task running)", figure("serial_share"),
            "serial_share_le_10pct_at_2_cores" if cores == 2 else None)  # fmt: skip
        row(f"{label}: driver's share of the CPU", figure("driver_cpu_share"),
            "driver_cpu_le_5pct_at_2_cores" if cores == 2 else None)  # fmt: skip
    row("speed-up 1 -> 2 cores",
        spread(scaling["speed_up_1_to_2_cores"], scaling["speed_up_by_round"]))  # fmt: skip
    row(f"  the most {scaling['machine_cores']} cores allow",
        spread(scaling["machine_ceiling"], scaling["machine_ceiling_by_round"]))  # fmt: skip
    row("  share of that ceiling",
        spread(scaling["speed_up_share_of_ceiling"], scaling["share_of_ceiling_by_round"]),
        "speed_up_ge_90pct_of_ceiling")  # fmt: skip
    amdahl = scaling["amdahl_speed_up"] or {}
    row("Amdahl: speed-up at 4 / 8 / 32 cores",
        " / ".join(str(amdahl[n]) for n in ("4", "8", "32")) if amdahl else None)  # fmt: skip
    if scaling_only:
        out.print(table)
        return
    throughput = data["throughput"]
    row("burst: joined clicks/s of batch time", throughput["joined_per_batch_s"])
    row("burst: CPU-s per 1,000 joined (every app)", throughput["cpu_s_per_1000_joined"])
    latency = data["latency"]
    row("latency p50 / p99 (live)", f"{latency['latency_p50_s']} / {latency['latency_p99_s']}")
    row("latency p90 (live)", latency["latency_p90_s"], "p90_le_5s_at_1000_clicks_per_s")
    row("from availability p50 / p90", f"{latency['available_p50_s']} / "
        f"{latency['available_p90_s']}")  # fmt: skip
    row("from availability p99", latency["available_p99_s"],
        "available_p99_le_5s_at_1000_clicks_per_s")  # fmt: skip
    row("knee: highest clicks/s with p90 <= 5 s", data["knee"]["clicks_per_s"],
        "knee_ge_2000_clicks_per_s")  # fmt: skip
    row("cache hit ratio (live)", data["cache"]["hit_ratio"], "cache_hits_ge_90pct")
    row("wasted joins", data["wasted_join_share"], "wasted_lt_5pct")
    registry = data["registry"]
    row("registry ids/s vs multi/s", f"{registry['ids_per_s']} vs {registry['transactions_per_s']}")
    out.print(table)


def _rates(value: str) -> str:
    try:
        rates = [float(r) for r in value.split(",")]
    except ValueError:
        raise typer.BadParameter(f"{value!r} is not a comma-separated list of rates") from None
    if not all(1 <= r <= 1_000_000 for r in rates):
        raise typer.BadParameter(f"{value!r}: each rate must be 1 to 1,000,000 clicks/s")
    return value


@bench_app.command("compare")
def bench_compare(
    ctx: typer.Context,
    queries: Annotated[
        int, typer.Option(help="Queries of each run's workload (both DCs).", min=1000)
    ] = 100_000,
    runs: Annotated[
        int, typer.Option(help="Runs; the figures are their medians.", min=1, max=20)
    ] = 3,
    warm_up_runs: Annotated[
        int,
        typer.Option(
            help="Runs of both systems first, not measured: they warm the stack's "
            "services (ZooKeeper's JIT) and the page cache.",
            min=0,
            max=5,
        ),
    ] = 1,
    json_out: JsonOption = False,
) -> None:
    """Photon against Spark's own stream-stream join on the same logs: events/s,
    completeness, duplicates across DCs."""
    from photon.tooling.bench import compare as compare_bench

    settings_of(ctx)  # validates the settings; each run sets its own roots and bucket
    with working("comparing with Spark's own join...") as status:
        data = compare_bench.run(
            queries=queries,
            runs=runs,
            warm_up_runs=warm_up_runs,
            on_step=lambda text: status.update(f"comparing with Spark's own join: {text}"),
        )
    if json_out:
        print_json(data)
        return
    table = Table("median of runs", "photon", "spark native join")
    photon, native = data["median"]["photon"], data["median"]["spark_native"]
    for key, label in (
        ("input_events_per_s", "input events/s (launch to last output)"),
        ("seconds", "seconds"),
        ("start_up_s", "start-up: launch to first output, s"),
        ("after_first_output_s", "first to last output, s"),
        ("completeness", "joinable clicks joined"),
        ("duplicates_across_dcs", "duplicates across DCs"),
        ("unexpected", "joins of unjoinable clicks"),
    ):
        table.add_row(label, *("-" if v[key] is None else str(v[key]) for v in (photon, native)))
    out.print(table)
    out.print(
        f"photon / native input events/s: {data['photon_vs_native_events_per_s']}x "
        f"(median of {runs} runs after {warm_up_runs} not measured; target >= 1.0)"
    )


@bench_app.command("verify")
def bench_verify(
    ctx: typer.Context,
    hours: Annotated[int, typer.Option(help="Hours of output at 1x.", min=1, max=24)] = 2,
    scale: Annotated[int, typer.Option(help="How many times the output grows.", min=2)] = 10,
    batches_per_hour: Annotated[
        int, typer.Option(help="Batches (objects) per DC and hour.", min=1, max=3600)
    ] = 360,
    clicks_per_batch: Annotated[int, typer.Option(help="Clicks per batch.", min=1)] = 50,
    runs: Annotated[
        int, typer.Option(help="Runs at each size; the figures are medians.", min=1, max=20)
    ] = 3,
    json_out: JsonOption = False,
) -> None:
    """Verification of a one-hour window at 1x and 10x the output: its time stays flat."""
    from photon.tooling.bench import verify as verify_bench

    settings = settings_of(ctx)
    with working("benchmarking verification...") as status:
        result = verify_bench.run(
            settings,
            hours=hours,
            scale=scale,
            batches_per_hour=batches_per_hour,
            clicks_per_batch=clicks_per_batch,
            runs=runs,
            on_step=lambda text: status.update(f"benchmarking verification: {text}"),
        )
    data = result.to_dict()
    if json_out:
        print_json(data)
        return
    table = Table("output", "objects", "verify the window (median s)", "read all output (s)")
    for size in data["sizes"]:
        table.add_row(f"{size['hours']} h", str(size["objects"]),
                      str(size["verify_median_s"]), str(size["read_all_median_s"]))  # fmt: skip
    out.print(table)
    out.print(
        f"output x{data['output_growth']}: verification x{data['verify_ratio']} "
        f"(target <= 1.5: {data['targets']['verify_ratio_le_1_5']}); "
        f"reading all output x{data['read_all_ratio']}"
    )
