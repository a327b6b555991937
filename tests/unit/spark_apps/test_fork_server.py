"""What the fork server serves and refuses, and its requests (spark_apps/fork_server.py)."""

from __future__ import annotations

import fcntl
import os
import time
from pathlib import Path

import pytest

from spark_apps import preloading_daemon
from spark_apps.fork_client import encode_request
from spark_apps.fork_server import (
    DIRECTORY_PREFIX,
    LOCK_NAME,
    SERVED,
    UNLOCKED_GRACE_S,
    Request,
    decode_request,
    preloads,
    refusal,
    remove_stale_directories,
)

pytestmark = pytest.mark.unit

ENV = {"PYTHONPATH": "/app", "PATH": "/bin"}


def _request(*argv: str, env: dict[str, str] | None = None, cwd: str = "/work") -> Request:
    return Request(list(argv), dict(ENV if env is None else env), cwd)


def test_a_request_the_client_sends_reads_back_on_the_server() -> None:
    sent = _request("-m", "pyspark.daemon", "pyspark.sql.worker.create_data_source")
    encoded = encode_request(sent.argv, sent.env, sent.cwd)
    assert int.from_bytes(encoded[:4], "big") == len(encoded) - 4
    assert decode_request(encoded[4:]) == sent
    assert sent.module == "pyspark.daemon"


@pytest.mark.parametrize(
    "body",
    [
        b'{"argv": "-m x", "env": {}, "cwd": "/"}',
        b'{"argv": ["-m", 1], "env": {}, "cwd": "/"}',
        b'{"argv": [], "env": {"A": 1}, "cwd": "/"}',
        b'{"argv": [], "env": {}, "cwd": null}',
        b'{"argv": []}',
        b"not json",
    ],
)
def test_a_malformed_request_is_an_error(body: bytes) -> None:
    with pytest.raises((ValueError, KeyError)):
        decode_request(body)


def test_spark_s_modules_on_the_path_to_the_first_batch_are_served() -> None:
    for argv in (
        ("-m", "pyspark.daemon", "pyspark.sql.worker.create_data_source"),
        ("-m", "pyspark.daemon", "pyspark.sql.worker.plan_data_source_read"),
        ("-m", "pyspark.sql.streaming.python_streaming_source_runner"),
        ("-m", preloading_daemon.MODULE, "pyspark.worker"),
    ):
        assert refusal(_request(*argv), ENV, "/work") is None, argv


@pytest.mark.parametrize(
    ("argv", "env", "cwd", "why"),
    [
        (("-m", "json.tool"), ENV, "/work", "not served"),
        (("-c", "print(1)"), ENV, "/work", "not served"),
        (("script.py",), ENV, "/work", "not served"),
        (("-m", "pyspark.daemon"), ENV, "/elsewhere", "working directory"),
        (("-m", "pyspark.daemon"), {"PYTHONPATH": "/other"}, "/work", "PYTHONPATH"),
        (("-m", "pyspark.daemon"), {}, "/work", "PYTHONPATH"),
    ],
)
def test_a_request_the_server_could_not_run_as_a_new_interpreter_would_is_refused(
    argv: tuple[str, ...], env: dict[str, str], cwd: str, why: str
) -> None:
    reason = refusal(_request(*argv, env=env, cwd=cwd), ENV, "/work")
    assert reason is not None and why in reason


def test_empty_pythonpath_entries_do_not_count() -> None:
    request = _request("-m", "pyspark.daemon", env={"PYTHONPATH": "/app::"})
    assert refusal(request, {"PYTHONPATH": ":/app"}, "/work") is None


def test_the_server_imports_every_served_module_and_the_task_workers_preloads() -> None:
    loaded = preloads()
    assert len(loaded) == len(set(loaded))
    for module in SERVED:
        assert module in loaded or module == preloading_daemon.MODULE
    for module in preloading_daemon.modules_for([preloading_daemon.MODULE]):
        assert module in loaded
    assert "spark_apps.growing_log_source" in loaded


def _socket_directory(parent: Path, name: str, *, lock: bool, age_s: float = 0.0) -> Path:
    directory = parent / f"{DIRECTORY_PREFIX}{name}"
    directory.mkdir(mode=0o700)
    if lock:
        (directory / LOCK_NAME).touch()
    made = time.time() - age_s
    os.utime(directory, (made, made))
    return directory


def test_the_sweep_removes_directories_whose_lock_is_free_or_that_have_none_past_the_grace(
    tmp_path: Path,
) -> None:
    free = _socket_directory(tmp_path, "free", lock=True)
    held = _socket_directory(tmp_path, "held", lock=True)
    old_unlocked = _socket_directory(tmp_path, "old", lock=False, age_s=UNLOCKED_GRACE_S + 5)
    new_unlocked = _socket_directory(tmp_path, "new", lock=False)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (elsewhere / LOCK_NAME).touch()
    linked = tmp_path / f"{DIRECTORY_PREFIX}link"
    linked.symlink_to(elsewhere)
    not_a_directory = tmp_path / f"{DIRECTORY_PREFIX}file"
    not_a_directory.write_text("")
    holder = os.open(held / LOCK_NAME, os.O_RDWR)  # as a live driver or server holds it
    try:
        fcntl.flock(holder, fcntl.LOCK_EX)
        assert sorted(remove_stale_directories(tmp_path)) == sorted([free, old_unlocked])
    finally:
        os.close(holder)
    assert held.is_dir() and new_unlocked.is_dir() and not_a_directory.is_file()
    assert linked.is_symlink() and (elsewhere / LOCK_NAME).exists()
    assert remove_stale_directories(tmp_path) == [held]  # its holder gone
