"""The S3 stand-in's middleware: write requests one at a time, reads alongside them."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable
from typing import Any

import pytest

from photon.tooling.stack.s3_standin import SerializedWrites

pytestmark = pytest.mark.unit


class Recorder:
    """A WSGI app that takes a while per request and records the most at once."""

    def __init__(self) -> None:
        self.running = 0
        self.most = dict.fromkeys(("PUT", "POST", "DELETE", "GET"), 0)
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start: Callable[..., Any]) -> Iterable[bytes]:
        method = environ["REQUEST_METHOD"]
        with self.lock:
            self.running += 1
            self.most[method] = max(self.most[method], self.running)
        time.sleep(0.02)
        start("200 OK", [])

        def body() -> Iterable[bytes]:  # produced lazily, as a streamed response is
            time.sleep(0.01)
            with self.lock:
                self.running -= 1
            yield b"done"

        return body()


def run_concurrently(app: SerializedWrites, method: str, n: int = 6) -> list[bytes]:
    results: list[bytes] = []

    def call() -> None:
        results.append(b"".join(app({"REQUEST_METHOD": method}, lambda *_: None)))

    threads = [threading.Thread(target=call) for _ in range(n)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return results


@pytest.mark.parametrize("method", ["PUT", "POST", "DELETE"])
def test_writes_run_one_at_a_time_their_responses_made_inside_the_lock(method: str) -> None:
    recorder = Recorder()
    assert run_concurrently(SerializedWrites(recorder), method) == [b"done"] * 6
    assert recorder.most[method] == 1


def test_reads_are_not_held_back() -> None:
    recorder = Recorder()
    assert run_concurrently(SerializedWrites(recorder), "GET") == [b"done"] * 6
    assert recorder.most["GET"] > 1
