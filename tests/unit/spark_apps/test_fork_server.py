"""What the fork server serves and refuses, and its requests (spark_apps/fork_server.py)."""

from __future__ import annotations

import pytest

from spark_apps import preloading_daemon
from spark_apps.fork_client import encode_request
from spark_apps.fork_server import SERVED, Request, decode_request, preloads, refusal

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
