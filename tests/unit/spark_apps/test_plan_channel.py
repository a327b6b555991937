"""The plan channel: tasks ask the driver for their group's plan over loopback."""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from multiprocessing import AuthenticationError
from multiprocessing.connection import Client

import pytest

from photon.join.group import GroupWork
from spark_apps.plan_channel import PlanAddress, PlanServer, _connection, ask_plan

pytestmark = pytest.mark.unit


def _work(batch: str, group: int) -> GroupWork:
    return GroupWork(batch, f"{batch}.g{group}", 1_000, False, [])


@pytest.fixture
def server() -> Iterator[PlanServer]:
    plans = PlanServer("127.0.0.1", wait_s=5.0)
    yield plans
    plans.close()


def test_a_task_gets_its_own_group_of_a_published_plan(server: PlanServer) -> None:
    server.publish("7", {0: _work("7", 0), 1: _work("7", 1)})
    got = ask_plan(server.address, "7", 1)
    assert got is not None and got.part == "7.g1" and got.now_us == 1_000


def test_a_task_that_asks_first_waits_for_the_plan(server: PlanServer) -> None:
    with ThreadPoolExecutor(1) as pool:
        asked = pool.submit(ask_plan, server.address, "8", 0)
        time.sleep(0.3)
        assert not asked.done()  # no plan yet: it waits
        server.publish("8", {0: _work("8", 0)})
        got = asked.result(timeout=5)
    assert got is not None and got.part == "8.g0"


def test_a_cancelled_batch_runs_nothing(server: PlanServer) -> None:
    server.publish("9", None)
    assert ask_plan(server.address, "9", 0) is None


def test_a_task_left_without_a_plan_past_the_wait_runs_nothing() -> None:
    plans = PlanServer("127.0.0.1", wait_s=0.2)
    try:
        began = time.monotonic()
        assert ask_plan(plans.address, "10", 0) is None
        assert 0.15 <= time.monotonic() - began < 3
        # Published later: a task Spark runs again gets it (its first try ran nothing).
        plans.publish("10", {0: _work("10", 0)})
        assert ask_plan(plans.address, "10", 0) is not None
    finally:
        plans.close()


def test_a_plan_stays_for_a_retried_task_until_forgotten(server: PlanServer) -> None:
    server.publish("11", {0: _work("11", 0)})
    assert ask_plan(server.address, "11", 0) is not None
    assert ask_plan(server.address, "11", 0) is not None  # a task's second try
    server.forget("11")
    # Forgotten: the driver waits for a plan again (its 5 s), so none comes at once.
    with Client((server.address.host, server.address.port), authkey=server.address.authkey) as conn:
        conn.send(("11", 0))
        assert not conn.poll(0.3)


def test_a_connection_without_the_key_is_refused(server: PlanServer) -> None:
    wrong = replace(server.address, authkey=b"x" * 32)
    with pytest.raises(AuthenticationError):
        ask_plan(wrong, "12", 0)
    server.publish("12", {0: _work("12", 0)})
    assert ask_plan(server.address, "12", 0) is not None  # the listener goes on


def test_a_task_gone_mid_handshake_leaves_the_listener_answering(server: PlanServer) -> None:
    for _ in range(3):  # connect, then reset the connection before the handshake ends
        raw = socket.create_connection((server.address.host, server.address.port))
        raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        raw.close()
    with Client((server.address.host, server.address.port), authkey=server.address.authkey) as conn:
        conn.send("not an ask")  # the key, but no (batch, group): closed, no answer
        with pytest.raises(EOFError):
            conn.recv()
    server.publish("15", {0: _work("15", 0)})
    got = ask_plan(server.address, "15", 0)
    assert got is not None and got.part == "15.g0"


def test_a_peer_that_stops_half_way_holds_up_no_other_task(server: PlanServer) -> None:
    # Connected, and silent: a host gone without closing its connections.
    with socket.create_connection((server.address.host, server.address.port)):
        server.publish("16", {0: _work("16", 0)})
        began = time.monotonic()
        got = ask_plan(server.address, "16", 0)
        assert got is not None and time.monotonic() - began < 2


def test_a_task_whose_driver_is_gone_fails() -> None:
    driver = subprocess.Popen(
        [sys.executable, "-c", _DRIVER],
        stdout=subprocess.PIPE,
        stdin=subprocess.PIPE,
        text=True,
    )
    try:
        assert driver.stdout is not None
        port, key = driver.stdout.readline().split()
        address = PlanAddress("127.0.0.1", int(port), bytes.fromhex(key), 5.0)
        driver.kill()
        driver.wait(timeout=10)
        with pytest.raises(OSError):  # refused: nothing listens any more
            ask_plan(address, "13", 0)
    finally:
        if driver.poll() is None:
            driver.kill()
            driver.wait()


_DRIVER = """
import sys
from spark_apps.plan_channel import PlanServer
server = PlanServer("127.0.0.1", wait_s=5.0)
print(server.address.port, server.address.authkey.hex(), flush=True)
sys.stdin.read()
"""


def test_closing_the_server_answers_the_waiting_tasks(server: PlanServer) -> None:
    results: list[object] = []
    asking = threading.Thread(target=lambda: results.append(ask_plan(server.address, "14", 0)))
    asking.start()
    time.sleep(0.2)
    server.close()
    asking.join(timeout=5)
    assert not asking.is_alive() and results == [None]


def test_each_end_sends_its_messages_at_once() -> None:
    """Both ends of an ask go through ``_connection``, which turns Nagle's algorithm
    off: with it on, a task's ask, sent right after its last handshake message, was
    held until the driver's kernel acknowledged that message, 40 ms later."""
    with socket.create_server(("127.0.0.1", 0)) as listener:
        client = socket.create_connection(listener.getsockname()[:2])
        accepted, _ = listener.accept()
        for sock in (client, accepted):
            with _connection(sock, 5.0) as conn:
                view = socket.socket(fileno=os.dup(conn.fileno()))
                with view:
                    assert view.getsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY) != 0


def test_a_wait_must_be_positive() -> None:
    with pytest.raises(ValueError, match="wait_s"):
        PlanServer("127.0.0.1", wait_s=0)
