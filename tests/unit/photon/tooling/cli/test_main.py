from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from photon.settings import SettingsError, load_settings
from photon.tooling.cli.main import app, hoist_global_options, main, parse_start

pytestmark = pytest.mark.unit

runner = CliRunner(env={"COLUMNS": "250", "NO_COLOR": "1"})


@pytest.fixture(autouse=True)
def private_paths(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    import os

    for key in list(os.environ):
        if key.startswith("PHOTON_"):
            monkeypatch.delenv(key)
    monkeypatch.setenv("PHOTON_LOGS_ROOT", str(tmp_path / "logs"))
    monkeypatch.setenv("PHOTON_STACK__STATE_DIR", str(tmp_path / "state"))


def test_the_command_line_loads_without_the_libraries_only_some_commands_use() -> None:
    """`photon --help`, `photon settings show`, `photon registry ...`: none of them pays for
    Spark, boto3, redis, Arrow or Great Expectations, which only some commands import in
    their bodies (kazoo's few modules come with the registry's errors, which any command
    may raise)."""
    import subprocess

    heavy = ("pyspark", "boto3", "redis", "pyarrow", "great_expectations", "pandas", "numpy")
    probe = (
        "import sys; import photon.tooling.cli.main; "
        f"print(','.join(m for m in {heavy!r} if m in sys.modules))"
    )
    loaded = subprocess.run(
        [sys.executable, "-c", probe], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert loaded == "", f"the CLI module imports {loaded} at load time"


def test_parse_start_accepts_today_now_and_iso() -> None:
    assert parse_start("2026-01-01T00:00:00") == 1_767_225_600_000_000
    assert parse_start("2026-01-01T01:00:00+01:00") == 1_767_225_600_000_000
    assert parse_start("today") % 86_400_000_000 == 0
    assert parse_start("now") > parse_start("today")


@pytest.mark.parametrize("text", ["1969-01-01T00:00:00", "1999-12-31T23:59:59Z", "9999-12-31"])
def test_parse_start_refuses_a_time_no_event_id_can_carry(text: str) -> None:
    with pytest.raises(typer.BadParameter, match="not between 2000 and 2200"):
        parse_start(text)


@pytest.mark.parametrize(
    ("args", "complaint"),
    [
        (["gen", "--mode", "fast"], "'fast' is not one of 'burst', 'live'"),
        (["gen", "--ctr", "1.5"], "ctr"),
        (["gen", "--queries", "0"], "queries"),
        (["gen", "--start", "yesterday-ish"], "not 'today', 'now' or an ISO-8601 time"),
        (["--log-level", "loud", "settings", "show"], "not one of"),
        (["logs", "scan", "--dc", "zz"], None),
        (
            ["run", "--master", "yarn"],
            "is not local, local[N], local[*], local[N,F] or spark://host:port",
        ),
        (["run", "--until-idle", "0"], "--until-idle"),
        (["join", "--dc", "a", "--until-idle", "-1"], "--until-idle"),
    ],
)
def test_bad_options_are_refused_with_a_clear_message(
    args: list[str], complaint: str | None
) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code != 0
    if complaint is not None:
        assert complaint in result.output
    else:
        assert "unknown DC 'zz'" in str(result.exception)


def test_run_refuses_an_unknown_dc_before_starting_anything(tmp_path: Path) -> None:
    result = runner.invoke(app, ["run", "--dcs", "a,zz"])
    assert result.exit_code != 0
    assert "unknown DC 'zz'" in str(result.exception)
    assert not (tmp_path / "state" / "pipelines").exists()


@pytest.mark.parametrize("listed", ["", " ", " , ", "a,", "a,,b"])
def test_run_refuses_a_dcs_list_with_an_empty_name_before_resetting_anything(
    listed: str, tmp_path: Path
) -> None:
    """Not read as "every DC": with --fresh that would reset every DC's state."""
    state = tmp_path / "state" / "pipelines" / "a" / "joiner"
    state.mkdir(parents=True)
    # A bad --master too: a run that took the list for every DC would stop at it (naming
    # --master), not start the apps.
    result = runner.invoke(app, ["run", "--dcs", listed, "--fresh", "--master", "yarn"])
    assert result.exit_code == 2, result.output
    assert "--dcs" in result.output and "empty DC name" in result.output
    assert state.is_dir()


def test_gen_then_scan_in_json(tmp_path: Path) -> None:
    result = runner.invoke(
        app, ["gen", "--queries", "300", "--start", "2026-01-01T00:00:00", "--json"]
    )
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout)
    assert summary["queries"] + summary["lost_queries"] == 300
    scan = runner.invoke(app, ["logs", "scan", "--json"])
    assert scan.exit_code == 0, scan.output
    rows = json.loads(scan.stdout)
    for dc in ("a", "b"):
        assert rows[dc]["queries"]["events"] == summary["queries"]
        assert rows[dc]["clicks"]["duplicates"] == summary["dcs"][dc]["duplicate_click_lines"]
        assert (
            rows[dc]["clicks"]["quarantined"] + rows[dc]["queries"]["quarantined"]
            == (summary["dcs"][dc]["malformed_lines"])
        )


def test_settings_show_masks_secrets() -> None:
    result = runner.invoke(app, ["settings", "show"])
    assert result.exit_code == 0
    assert "photon-local-secret" not in result.output
    assert json.loads(result.stdout)["dcs"] == ["a", "b"]


def test_status_without_a_stack_says_so_and_fails() -> None:
    result = runner.invoke(app, ["stack", "status", "--json"])
    assert result.exit_code == 1
    assert json.loads(result.stdout)["healthy"] is False


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["gen", "--rate", "-1"], "--rate"),
        (["gen", "--orphan-fraction", "2"], "--orphan-fraction"),
        (["gen", "--outage-s", "-5"], "--outage-s"),
    ],
)
def test_a_bad_gen_value_names_its_flag(args: list[str], flag: str) -> None:
    result = runner.invoke(app, args)
    assert result.exit_code == 2
    assert f"Invalid value for {flag}:" in result.output
    assert "query_rate" not in result.output


@pytest.mark.parametrize(
    ("argv", "hoisted"),
    [
        (["status", "--config", "f.toml"], ["--config", "f.toml", "status"]),
        (["settings", "show", "-c", "f.toml"], ["-c", "f.toml", "settings", "show"]),
        (["--config", "f.toml", "status"], ["--config", "f.toml", "status"]),
        (["status", "--log-level=debug", "--json"], ["--log-level=debug", "status", "--json"]),
        (["--config", "status", "status"], ["--config", "status", "status"]),  # a file "status"
        (["logs", "scan", "--", "--config"], ["logs", "scan", "--", "--config"]),
    ],
)
def test_the_root_options_may_follow_the_command(argv: list[str], hoisted: list[str]) -> None:
    assert hoist_global_options(argv) == hoisted


def test_every_command_takes_config_after_its_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    config = tmp_path / "photon.toml"
    config.write_text('[zookeeper]\nroot = "/from-the-file"\n')
    monkeypatch.setattr(sys, "argv", ["photon", "settings", "show", "--config", str(config)])
    with pytest.raises(SystemExit) as exit_info:
        main()
    assert exit_info.value.code in (0, None)
    assert json.loads(capsys.readouterr().out)["zookeeper"]["root"] == "/from-the-file"


def test_a_toml_syntax_error_names_the_file_and_line(tmp_path: Path) -> None:
    config = tmp_path / "broken.toml"
    config.write_text('[zookeeper\nroot = "/x"\n')
    with pytest.raises(SettingsError, match=r"broken\.toml is not valid TOML: .*line 1"):
        load_settings(config)
    result = runner.invoke(app, ["--config", str(config), "settings", "show"])
    assert result.exit_code != 0


@pytest.mark.parametrize(
    ("argv", "line"),
    [
        (["verify", "--lookback-s", "-5"],
         "error: --lookback-s: Input should be greater than or equal to 1"),
        (["recover", "--dc", "zz"], "error: --dc: 'zz' is not a configured DC (a, b)"),
        (["verify", "--window-start", "yesterday"],
         "error: --window-start: 'yesterday' is not an ISO-8601 date-time"),
        (["gen", "--rate", "-1"], "error: Invalid value for --rate:"),
        (["verify", "--nope"], "error: No such option: --nope (see `photon verify --help`)"),
    ],
)  # fmt: skip
def test_the_command_line_says_a_bad_value_in_one_line_and_exits_2(
    argv: list[str], line: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr("sys.argv", ["photon", *argv])
    monkeypatch.setenv("COLUMNS", "40")  # narrow: still one line, no panel
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1 and err.startswith(line), err
    assert "Value error" not in err and "invalid params" not in err and "╭" not in err


@pytest.mark.parametrize(
    ("argv", "flag"),
    [
        (["stack", "s3-policies", "--out", "{blocked}/policies"], "--out"),
        (["stack", "compose-env", "--example", "{example}", "--out", "{blocked}/.env"], "--out"),
        (["report", "--run", "{run}", "--out", "{blocked}/report"], "--out"),
        (["run", "--dcs", "a", "--record", "{blocked}/metrics"], "--record"),
    ],
)
def test_an_output_path_that_cannot_be_written_is_refused_naming_its_flag(
    argv: list[str],
    flag: str,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """A file where a directory must go: refused before anything starts, in one line."""
    blocked = tmp_path / "a-file"
    blocked.write_text("not a directory")
    example = tmp_path / ".env.example"
    example.write_text("S3_SECRET=\n")
    run = tmp_path / "run"
    run.mkdir()
    (run / "metrics.jsonl").write_text("")
    paths = {"blocked": str(blocked), "example": str(example), "run": str(run)}
    monkeypatch.setattr("sys.argv", ["photon", *(arg.format(**paths) for arg in argv)])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    err = capsys.readouterr().err
    assert len(err.strip().splitlines()) == 1, err
    assert err.startswith(f"error: Invalid value for {flag}: cannot make {blocked}"), err
    assert blocked.read_text() == "not a directory"


def test_a_file_a_step_cannot_write_is_said_in_one_line_not_a_traceback(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    blocked = tmp_path / "a-file"
    blocked.write_text("")
    monkeypatch.setenv("PHOTON_LOGS_ROOT", str(blocked / "logs"))  # under a file
    monkeypatch.setattr("sys.argv", ["photon", "gen", "--queries", "100", "--json"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 1
    err = capsys.readouterr().err.strip().splitlines()
    assert err[-1].startswith("error: ") and "Not a directory" in err[-1], err
    assert not any("Traceback" in line for line in err), err


def test_a_command_that_ends_with_a_status_exits_with_it(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # `photon stack status` exits 1 when no stack runs (typer.Exit(1) in the command)
    monkeypatch.setattr("sys.argv", ["photon", "stack", "status", "--json"])
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 1
    assert json.loads(capsys.readouterr().out)["healthy"] is False


def test_status_into_a_pipe_draws_once_and_says_what_is_down(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With no terminal to redraw (a pipe, a log, cron), the live dashboard would print
    nothing and never end: it draws once, and a stack that is down is a problem line."""
    from tests.conftest import stack_env

    for key, value in stack_env(tmp_path).items():  # free ports: nothing listens there
        monkeypatch.setenv(key, value)
    result = runner.invoke(app, ["status", "--interval", "0.5"])
    assert result.exit_code == 1, result.output
    assert "problem: no ZooKeeper node of" in result.output
    assert "problem: Redis at" in result.output
