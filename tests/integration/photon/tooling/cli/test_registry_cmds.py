"""`photon registry ...` and `photon bench registry` against the shared real stack."""

from __future__ import annotations

import json
import time
import uuid

import pytest
from typer.testing import CliRunner

from photon.tooling.cli.main import app
from photon.tooling.stack.manager import LocalStack
from registry import EventId

pytestmark = pytest.mark.integration


@pytest.fixture
def cli(local_stack: LocalStack, stack_environment: dict[str, str]) -> CliRunner:
    root = f"/photon-cli-{uuid.uuid4().hex[:10]}"
    return CliRunner(env=stack_environment | {"PHOTON_ZOOKEEPER__ROOT": root, "COLUMNS": "250"})


def run(cli: CliRunner, *args: str, code: int = 0) -> str:
    result = cli.invoke(app, ["--log-level", "error", *args])
    assert result.exit_code == code, result.output + str(result.exception)
    return result.stdout


def test_register_lookup_tokens_status(cli: CliRunner) -> None:
    now = time.time_ns() // 1000
    a, b = str(EventId("10.1.1.1", 7, now)), str(EventId("10.1.1.2", 7, now + 1))
    assert json.loads(run(cli, "registry", "register", a, "--token", "t1", "--json")) == {
        a: "committed"
    }
    assert json.loads(run(cli, "registry", "register", a, "--token", "t2", "--json")) == {
        a: "already_registered"
    }
    assert json.loads(run(cli, "registry", "lookup", a, b, "--json")) == {a: "present", b: "absent"}
    assert json.loads(run(cli, "registry", "tokens", "read", a, b, "--json")) == {a: "t1", b: None}
    deleted = run(cli, "registry", "tokens", "delete-if", a, "--token", "t2", "--json")
    assert json.loads(deleted) == {a: False}
    assert json.loads(run(cli, "registry", "tokens", "clear", a, "--json")) == {"cleared": 1}
    status = json.loads(run(cli, "registry", "status", "--json"))
    assert status["ids"] == 1 and len(status["shards"]) == 8
    assert status["epochs"] == [{"start_us": 0, "shards": 8}]


def test_reshard_and_gc(cli: CliRunner) -> None:
    epoch = json.loads(
        run(cli, "registry", "reshard", "--shards", "12", "--skew-s", "120", "--json")
    )
    assert epoch["shards"] == 12
    assert epoch["start_us"] > time.time_ns() // 1000 + 100_000_000
    status = json.loads(run(cli, "registry", "status", "--json"))
    assert [e["shards"] for e in status["epochs"]] == [8, 12]
    assert len(status["shards"]) == 12
    gc = json.loads(run(cli, "registry", "gc", "--json"))
    assert len(gc) == 12
    assert all(row["boundary_us"] > 0 for row in gc)


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["registry", "lookup", "not-an-id"], "not '<ipv4>:<pid>:<ts_us>'"),
        (["registry", "register", "10.1.1.1:7:1767225600000000"], "--token"),
        (["registry", "reshard", "--shards", "0"], "--shards"),
        (["registry", "reshard", "--shards", "4", "--skew-s", "1"], "below the configured maximum"),
        (["registry", "gc", "--shard", "99"], "shard 99 does not exist"),
    ],
)
def test_bad_arguments_are_refused_before_anything_changes(
    cli: CliRunner, args: list[str], complaint: str
) -> None:
    result = cli.invoke(app, args)
    assert result.exit_code == 2, result.output
    assert complaint in result.output


def test_the_benchmark_prints_every_figure(cli: CliRunner) -> None:
    data = json.loads(
        run(cli, "bench", "registry", "--batches", "3", "--unbatched", "20", "--json")
    )
    for size in ("100", "500", "1000"):
        assert data["batched_ids_per_s"][size] > 0
        assert data["raw_multi_ids_per_s"][size] > 0
        assert data["batched"][size]["p99_ms"] >= data["batched"][size]["p50_ms"] > 0
        # The local stack's three nodes, found by their records: each size's creates
        # cost them CPU (3,000 ids at 1,000 a call: ~0.1 CPU-s on a 2-core machine).
        assert data["ensemble_cpu_s_per_1000_ids"][size] >= 0
        assert data["client_cpu_s_per_1000_ids"][size] > 0
    assert data["ensemble_cpu_s_per_1000_ids"]["1000"] > 0
    assert data["unbatched_ids_per_s"] > 0 and data["lookup_ids_per_s"] > 0
    assert set(data["targets"]) == {"batched_ge_25x_unbatched", "batched_ge_half_raw_at_1000"}
