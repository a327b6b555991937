"""``dag.test()`` of each operations DAG against the real local stack (ZooKeeper, S3, Spark)."""

from __future__ import annotations

import io
import time
import urllib.parse
import urllib.request
from collections import Counter
from typing import Any

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from photon.join.logmap import delta_prefix, sorted_prefix
from photon.join.output import JOINED_BASE, OutputWriter, event_hour, joined_key, rows_under
from photon.ops.compaction import lookups, read_runs, sample_entries
from photon.ops.verify import read_report
from tests.conftest import RunDag
from tests.integration.dags.conftest import task_states, xcom
from tests.integration.ops_pipelines import OpsPhoton, S

pytestmark = pytest.mark.integration


def test_gc_boundary_dag_advances_boundaries_and_never_lowers_one(
    run_dag: RunDag, ops_photon: OpsPhoton
) -> None:
    registry = ops_photon.registry
    retention_us = int(ops_photon.settings.retention.total_seconds() * S)
    now = time.time_ns() // 1000
    old = [f"10.0.0.{n}:1:{now - retention_us - 3600 * S + n}" for n in range(1, 21)]
    fresh = [f"10.0.1.{n}:1:{now - 60 * S + n}" for n in range(1, 21)]
    registry.register((i, "a/run/0") for i in old + fresh)
    ahead = now - retention_us + 600 * S  # shard 0 is already past the target
    registry.advance_gc_boundary(0, ahead)

    dag_run = run_dag("photon_gc_boundary")

    assert str(dag_run.state) == "success", task_states(dag_run)
    report = xcom(dag_run, "advance_and_collect")
    target = report["target_us"]
    # ZooKeeper's clock, in whole milliseconds (the same host's clock here).
    assert now - retention_us - 1_000 <= target <= time.time_ns() // 1000 - retention_us
    by_shard = {s["shard"]: s for s in report["shards"]}
    assert registry.gc_boundary(0) == ahead == by_shard[0]["boundary_us"]  # never lowered
    for shard in range(1, registry.sharding().max_shards):
        assert registry.gc_boundary(shard) == target == by_shard[shard]["boundary_us"]
    assert report["deleted_ids"] == len(old)
    assert set(registry.registered(0, 2**62)) == set(fresh)


def test_reshard_dag_appends_the_epoch_after_the_skew_and_confirms_the_pipelines(
    run_dag: RunDag, ops_photon: OpsPhoton
) -> None:
    ops_photon.joiner("a")  # a running pipeline: it announces its config version
    before = ops_photon.registry.sharding()
    asked_at = time.time_ns() // 1000

    dag_run = run_dag("photon_reshard", shards=6, skew_s=3.0, dry_run=False)

    assert str(dag_run.state) == "success", task_states(dag_run)
    after = ops_photon.registry.sharding()
    assert len(after.epochs) == len(before.epochs) + 1
    assert after.epochs[-1].shards == 6
    assert after.epochs[-1].start_us >= asked_at + 3 * S
    assert time.time_ns() // 1000 >= after.epochs[-1].start_us  # the run waited for the start
    report = xcom(dag_run, "report")
    rollout = report["confirm_pipelines"]
    assert rollout["complete"] and rollout["config_version"] == after.version
    assert [m for m in rollout["members"] if m.startswith("joiner-a-")]


@pytest.mark.parametrize(
    "conf",
    [
        {"shards": 6, "skew_s": 1.0},  # below the configured clock-skew bound (2 s)
        {"shards": 0, "skew_s": 3.0},
        {"shards": 6, "skew_s": 3.0, "unknown": 1},
    ],
)
def test_reshard_dag_rejects_invalid_params_and_changes_nothing(
    run_dag: RunDag, ops_photon: OpsPhoton, conf: dict[str, object]
) -> None:
    before = ops_photon.registry.sharding()
    try:
        dag_run = run_dag("photon_reshard", **conf)
    except Exception as exc:  # the trigger form's schema rejects it before the run
        assert "shards" in str(exc) or "unknown" in str(exc)
    else:
        assert str(dag_run.state) == "failed"
        assert task_states(dag_run)["append_epoch"] == "failed"
    after = ops_photon.registry.sharding()
    assert after.epochs == before.epochs and after.version == before.version


def test_logmap_compaction_dag_merges_runs_and_leaves_lookups_identical(
    run_dag: RunDag, ops_photon: OpsPhoton
) -> None:
    ops_photon.generate()
    ops_photon.run("a")
    store, settings = ops_photon.store, ops_photon.settings
    runs = read_runs(store, "a")
    assert len(runs.delta_keys) > 3
    query_dir = settings.dc_logs("a") / "queries"
    w_us = int(settings.log_file_map.window_s * S)
    m = settings.log_file_map.max_bytes
    sample = sample_entries(sorted(set(runs.entries)), 100)
    before = lookups(runs.entries, sample, query_dir, w_us, m)
    assert sum(line is not None for line in before.values()) == len(sample)

    dag_run = run_dag("photon_logmap_compaction", dc="a", sample=50)

    assert str(dag_run.state) == "success", task_states(dag_run)
    assert list(store.keys(delta_prefix("a"))) == []
    [new_run] = list(store.keys(sorted_prefix("a")))
    after = read_runs(store, "a")
    assert lookups(after.entries, sample, query_dir, w_us, m) == before
    assert len(after.entries) == len(set(runs.entries))
    [report] = xcom(dag_run, "report")["dcs"]
    assert report["new_run"] == new_run and report["mismatches"] == []
    assert report["sampled"] == min(50, len(set(runs.entries)))


def _verify(run_dag: RunDag, ops: OpsPhoton) -> tuple[Any, dict[str, Any]]:
    end = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(time.time() - 1))
    start = time.strftime("%Y-%m-%dT%H:%M:%S+00:00", time.gmtime(ops.start_us / S - 120))
    dag_run = run_dag("photon_verify", window_start=start, window_end=end)
    run = xcom(dag_run, "validate_params")["run"]
    report = read_report(ops.store, run)
    assert report is not None
    return dag_run, report


def test_verify_dag_passes_on_clean_output_and_fails_on_a_planted_duplicate(
    run_dag: RunDag, ops_photon: OpsPhoton
) -> None:
    manifest = ops_photon.generate()
    ops_photon.run("a")
    ops_photon.run("b")

    dag_run, report = _verify(run_dag, ops_photon)

    assert str(dag_run.state) == "success", task_states(dag_run)
    assert report["passed"] is True
    done = report["completeness"]
    assert done["joined"] == len(manifest.expected_joins) and done["duplicates"] == 0
    assert done["complete_pct"] == 100.0 and done["missing"] == done["lost"] == 0
    assert all(e["success"] for e in report["expectations"])
    assert ops_photon.store.get(f"reports/verify/{report['run']}/report.html") is not None
    # the GX Checkpoint's Data Docs, beside the report, linked from it
    docs = f"reports/verify/{report['run']}/"
    assert report["data_docs"].startswith("data_docs/validations/photon_joined_output/")
    assert ops_photon.store.get(docs + report["data_docs"]) is not None
    assert ops_photon.store.get(docs + "data_docs/index.html") is not None
    page = ops_photon.store.get(docs + "report.html")
    assert page is not None and report["data_docs"].encode() in page
    # the task links both: URLs a browser opens without S3 keys
    report_link = xcom(dag_run, "report", key="_link_ReportLink")
    docs_link = xcom(dag_run, "report", key="_link_DataDocsLink")
    assert f"/reports/verify/{report['run']}/report.html?" in urllib.parse.unquote(report_link)
    assert "X-Amz-Expires=604800" in report_link  # a week, signed (SigV4)
    assert b'<h1>Photon verification: <span style="color:#1a7f37">PASSED' in fetch(report_link)
    assert b"photon_joined_output" in fetch(docs_link)
    # the ids confirmed in output had their tokens cleared
    some = next(iter(manifest.expected_joins))
    assert ops_photon.registry.read_token(some) == ""

    # plant one of DC a's joined rows in DC b's output: a duplicate across DCs
    joined_a = rows_under(ops_photon.store, "joined/dc=a/")
    planted = {**joined_a[0], "dc": "b"}
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist([planted]), sink)
    planted_key = joined_key("b", "planted", "000000000000", event_hour(planted["click_id"]))
    ops_photon.store.put(planted_key, sink.getvalue())

    dag_run, report = _verify(run_dag, ops_photon)

    assert str(dag_run.state) == "failed"
    assert report["passed"] is False
    [unique] = [e for e in report["expectations"] if e["expectation"].endswith("to_be_unique")]
    assert not unique["success"] and unique["unexpected_count"] == 2
    assert report["completeness"]["duplicates"] == 1


def test_recover_dag_restores_clicks_lost_between_registry_commit_and_output_write(
    run_dag: RunDag, ops_photon: OpsPhoton
) -> None:
    manifest = ops_photon.generate()
    app = ops_photon.joiner("a")
    ops_photon.crash_between_commit_and_write("a", 2)  # batch 2 dies after its commit
    ops_photon.run("a")  # the pipeline goes on from a new batch: batch 2 is never replayed
    ops_photon.run("b")

    dag_run, report = _verify(run_dag, ops_photon)
    assert str(dag_run.state) == "failed"
    lost = report["completeness"]["lost"]
    assert lost > 0 and report["completeness"]["joined"] == len(manifest.expected_joins) - lost

    tokens_before = ops_photon.registry.registered(0, 2**62)
    pending_before = app.retries.pending() if app.retries else -1
    window = {"window_start": report["window_start"], "window_end": report["window_end"]}
    dry = run_dag("photon_recover", **window, dry_run=True)
    assert str(dry.state) == "success", task_states(dry)
    dry_report = xcom(dry, "recover")
    assert dry_report["dead"] == lost and dry_report["deleted"] == 0
    assert ops_photon.registry.registered(0, 2**62) == tokens_before  # a dry run changes nothing
    assert app.retries is not None and app.retries.pending() == pending_before

    done = run_dag("photon_recover", **window, dry_run=False)
    assert str(done.state) == "success", task_states(done)
    recovered = xcom(done, "recover")
    assert recovered["reinjected"] == lost and len(recovered["recovery_logs"]) == 1
    assert app.retries.pending() == pending_before  # nothing written into a joiner's state
    # The clicks come back as DC a's input: its joiner reads the recovery log.
    ops_photon.clock.now_us = time.time_ns() // 1000
    assert ops_photon.read_recovery_logs("a") == lost

    dag_run, report = _verify(run_dag, ops_photon)
    assert str(dag_run.state) == "success", report["failures"]
    assert report["completeness"]["complete_pct"] == 100.0
    assert report["completeness"]["duplicates"] == 0
    joined = Counter(r["click_id"] for r in rows_under(ops_photon.store, "joined/"))
    assert set(joined) == set(manifest.expected_joins) and max(joined.values()) == 1


@pytest.mark.parametrize(
    ("dag_id", "conf", "failed_task"),
    [
        (
            "photon_recover",
            {"window_end": "2099-01-01T00:00:00+00:00", "dry_run": False},
            "recover",
        ),
        ("photon_verify", {"window_end": "2099-01-01T00:00:00+00:00"}, "validate_params"),
        (
            "photon_recover",
            {"window_start": "2026-01-02T00:00:00Z", "window_end": "2026-01-01T00:00:00Z"},
            "recover",
        ),
    ],
)
def test_windows_in_the_future_fail_before_any_change(
    run_dag: RunDag, ops_photon: OpsPhoton, dag_id: str, conf: dict[str, object], failed_task: str
) -> None:
    before = sorted(ops_photon.store.keys(""))
    dag_run = run_dag(dag_id, **conf)
    assert str(dag_run.state) == "failed"
    assert task_states(dag_run)[failed_task] == "failed"
    assert sorted(ops_photon.store.keys("")) == before  # no report, no run, nothing written


@pytest.mark.parametrize(
    ("dag_id", "conf"),
    [
        ("photon_recover", {"dc": "zz", "dry_run": False}),
        ("photon_logmap_compaction", {"dc": "zz"}),
    ],
)
def test_a_dc_that_is_not_configured_is_refused_before_a_run_starts(
    run_dag: RunDag, ops_photon: OpsPhoton, dag_id: str, conf: dict[str, object]
) -> None:
    from airflow.exceptions import ParamValidationError

    before = sorted(ops_photon.store.keys(""))
    with pytest.raises(ParamValidationError, match="'zz' is not one of"):
        run_dag(dag_id, **conf)  # the DC param is a choice of the configured DCs
    assert sorted(ops_photon.store.keys("")) == before


def fetch(url: str) -> bytes:
    """GET ``url`` as a browser would: no credentials but what the URL holds."""
    with urllib.request.urlopen(url, timeout=10) as answer:
        body: bytes = answer.read()
    return body


def test_output_hours_announces_each_settled_hour_once_and_nothing_when_none_is_new(
    run_dag: RunDag, ops_photon: OpsPhoton
) -> None:
    hour_us = 3600 * S
    now_hour_us = time.time_ns() // 1000 // hour_us * hour_us

    def plant(hours_ago: int, dc: str = "a") -> str:
        ts_us = now_hour_us - hours_ago * hour_us + 7 * S
        row = {"click_id": f"10.0.0.1:80:{ts_us}", "query_id": f"10.0.0.2:80:{ts_us - S}",
               "dc": dc, "joined_at_us": ts_us + S, "token": f"{dc}/hours/1"}  # fmt: skip
        OutputWriter(ops_photon.store, dc, "hours").joined("000000000001", [row], JOINED_BASE)
        return event_hour(str(row["click_id"]))

    oldest = plant(5)
    first = run_dag("photon_output_hours")
    assert xcom(first, "announce_settled_hours") == {"hours": [oldest]}

    newer = sorted({plant(4, "b"), plant(3)})
    plant(0)  # the current hour: not settled, never announced yet
    second = run_dag("photon_output_hours")
    assert xcom(second, "announce_settled_hours") == {"hours": newer}

    third = run_dag("photon_output_hours")  # nothing new: skipped, no event
    assert task_states(third) == {"announce_settled_hours": "skipped"}
    assert announcements() == [[oldest], newer]


def announcements() -> list[Any]:
    """The hours of every event of the joined-output asset, oldest first."""
    from airflow.models.asset import AssetEvent, AssetModel
    from airflow.utils.session import create_session

    with create_session() as session:
        events = (
            session.query(AssetEvent)
            .join(AssetModel, AssetEvent.asset_id == AssetModel.id)
            .filter(AssetModel.name == "photon_joined_output")
            .order_by(AssetEvent.timestamp)
            .all()
        )
        return [event.extra.get("hours") for event in events]
