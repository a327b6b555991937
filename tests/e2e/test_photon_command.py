"""The `photon` console script as a user runs it, against a private stack."""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import psutil
import pytest

from tests.conftest import stack_env
from tests.e2e.helpers import running

pytestmark = pytest.mark.e2e

PHOTON = str(Path(sys.executable).parent / "photon")


def _environment(env: dict[str, str]) -> dict[str, str]:
    """This process's environment without its PHOTON_ settings, then ``env``'s."""
    return {k: v for k, v in os.environ.items() if not k.startswith("PHOTON_")} | env


def run(
    env: dict[str, str], *args: str, check: bool = True, timeout_s: float = 400
) -> subprocess.CompletedProcess[str]:
    """Runs `photon ARGS`; past `timeout_s`, or stopped meanwhile (the test's own timeout),
    it is sent SIGTERM first, so a command that started apps (chaos, run) stops them
    rather than leaving them to init (:func:`tests.e2e.helpers.running`)."""
    with running(
        [PHOTON, *args], env=_environment(env), stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        text=True,
    ) as process:  # fmt: skip
        stdout, stderr = process.communicate(timeout=timeout_s)
    result = subprocess.CompletedProcess(process.args, process.returncode, stdout, stderr)
    if check:
        assert result.returncode == 0, result.stdout + result.stderr
    return result


def test_up_status_gen_scan_down(tmp_path: Path) -> None:
    env = stack_env(tmp_path)
    try:
        started = run(env, "up", "--json")
        up = json.loads(started.stdout)
        assert up["healthy"] is True
        # no terminal: what it is doing is said once, not before every other line
        assert started.stderr.count("starting the local stack") == 1, started.stderr
        assert "local stack" not in [line.strip() for line in started.stderr.splitlines()]
        assert up["endpoints"]["zookeeper"].count(",") == 2
        again = json.loads(run(env, "up", "--json").stdout)
        assert [s["pid"] for s in again["services"]] == [s["pid"] for s in up["services"]]
        status = json.loads(run(env, "stack", "status", "--json").stdout)
        nodes = [s for s in status["services"] if re.fullmatch(r"zk\d+", s["name"])]
        modes = sorted(s["detail"] for s in nodes)
        assert modes == ["follower", "follower", "leader"]

        gen = json.loads(run(env, "gen", "--queries", "500", "--json").stdout)
        scan = json.loads(run(env, "logs", "scan", "--json").stdout)
        assert scan["a"]["queries"]["events"] == gen["queries"]
        assert scan["b"]["clicks"]["events"] == gen["dcs"]["b"]["click_lines"]
        refused = run(env, "gen", "--queries", "500", check=False)
        assert refused.returncode == 2 and "--clean" in refused.stderr
        _chaos_stopped_by_sigterm_stops_its_apps(env, tmp_path)
    finally:
        down = run(env, "down", "--purge")
    assert "stopped: zk1, zk2, zk3, redis, s3" in down.stdout
    assert json.loads(run(env, "stack", "status", "--json", check=False).stdout)["healthy"] is False


def _chaos_stopped_by_sigterm_stops_its_apps(env: dict[str, str], tmp_path: Path) -> None:
    """SIGTERM to `photon chaos` (a timeout, Ctrl-C's cousin) stops the DC apps it started:
    none is left running under init with its JVM and Python workers."""
    argv = [
        PHOTON, "chaos", "--queries", "8000", "--rate", "400", "--outage-s", "4",
        "--restart-after-s", "2", "--report-dir", str(tmp_path / "chaos"),
    ]  # fmt: skip
    with running(argv, env=_environment(env), stdout=subprocess.DEVNULL,
                 stderr=subprocess.DEVNULL) as chaos:  # fmt: skip
        apps: list[psutil.Process] = []
        jvms: list[psutil.Process] = []
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and chaos.poll() is None:
            tree = psutil.Process(chaos.pid).children(recursive=True)
            apps = [p for p in tree if "spark_apps." in " ".join(_cmdline(p))]
            jvms = [p for p in tree if "org.apache.spark" in " ".join(_cmdline(p))]
            if len(apps) >= 2 and jvms:  # the apps are up, their Spark JVMs too
                break
            time.sleep(0.5)
        assert len(apps) >= 2 and jvms, "the chaos run started no DC apps"
        everything = psutil.Process(chaos.pid).children(recursive=True)
        chaos.terminate()
        code = chaos.wait(timeout=90)
    _, alive = psutil.wait_procs(everything, timeout=30)
    assert not alive, [_cmdline(p) for p in alive]
    assert code == 128 + signal.SIGTERM


def _cmdline(process: psutil.Process) -> list[str]:
    try:
        return process.cmdline()
    except psutil.Error:
        return []


def test_gen_with_the_same_seed_twice_writes_identical_files(tmp_path: Path) -> None:
    trees = []
    for name in ("one", "two"):
        env = stack_env(tmp_path / name)
        run(env, "gen", "--seed", "123", "--queries", "400", "--json")
        root = tmp_path / name / "logs"
        trees.append(
            {str(p.relative_to(root)): p.read_bytes() for p in root.rglob("*") if p.is_file()}
        )
    assert trees[0] == trees[1]
    assert "manifest.json" in trees[0]


def test_a_bad_setting_is_one_clear_line_and_exit_2(tmp_path: Path) -> None:
    env = stack_env(tmp_path) | {"PHOTON_STACK__REDIS_PORT": "99999"}
    result = run(env, "up", check=False)
    assert result.returncode == 2
    [line] = [x for x in result.stderr.splitlines() if "stack.redis_port" in x]
    assert line.endswith("stack.redis_port (from PHOTON_STACK__REDIS_PORT): Input should be "
                         "less than or equal to 65535")  # fmt: skip
    assert "Traceback" not in result.stderr


def test_demo_runs_the_main_job_and_cleans_up(tmp_path: Path) -> None:
    """The README's `make demo`: the default demo (3,000 queries), on private ports."""
    # Wide enough that no table cell wraps (a joiner's row holds its cache hit ratio).
    env = stack_env(tmp_path) | {"COLUMNS": "200"}
    # Within the test's own timeout (900 s), with time to stop the demo's apps and stack.
    result = run(env, "demo", timeout_s=720)
    for step in ("local stack up", "pipelines join them", "audit", "stack status", "stack down"):
        assert step in result.stdout
    assert "verdict: exactly once" in result.stdout
    figures = {
        name.strip(): value.strip()
        for name, value in re.findall(r"│\s+([a-z][A-Za-z ,()]+?)\s*│\s+(\d+)\s*│", result.stdout)
    }
    assert figures["duplicates in the union of outputs"] == "0"
    assert figures["missing"] == "0"
    # Every never-joinable click written out as unjoinable, in each DC, and no other.
    never = figures["never joinable (manifest)"]
    assert figures["unjoinable in DC a"] == figures["unjoinable in DC b"] == never
    # Its start-up, as a user sees it: a time after launch (how long is the benchmarks').
    started = re.search(r"first joined click: (\d+\.\d) s after launch", result.stdout)
    assert started is not None and float(started.group(1)) > 0
    # Each DC's joiner warmed its Python workers before its first batch (docs/join.md).
    warmed = [
        line
        for log in tmp_path.rglob("app.log")
        for line in log.read_text(errors="replace").splitlines()
        if "joiner.warmed_up" in line
    ]
    for dc in ("a", "b"):
        assert any(f"dc={dc}" in line or f'"dc": "{dc}"' in line for line in warmed), warmed
    # The cache hit ratio is of the queries found: every DC's is a share, not "0%" when
    # clicks wait for queries not read yet (docs/join.md, "Cache hits").
    ratios = [int(r) for r in re.findall(r"cache hits (\d+)%", result.stdout)]
    assert len(ratios) == 2 and all(0 < r <= 100 for r in ratios)
    assert "stopped: zk1, zk2, zk3, redis, s3" in result.stdout
    assert not (tmp_path / "state" / "stack.json").exists()
