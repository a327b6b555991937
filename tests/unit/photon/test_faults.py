"""Fault injection points: off by default, each fault when and only when configured."""

from __future__ import annotations

import threading
from typing import NoReturn

import pytest
from botocore.exceptions import ConnectTimeoutError

from photon.faults import CRASH_EXIT_CODE, NO_FAULTS, STEPS, FaultInjector, InjectedTaskFailure
from photon.settings import FaultSettings, SettingsError, load_settings
from photon.storage import _transient

pytestmark = pytest.mark.unit


class Crashed(Exception):
    pass


def crash(code: int) -> NoReturn:
    raise Crashed(code)


def test_no_fault_is_on_by_default() -> None:
    assert not NO_FAULTS.active and not FaultInjector(load_settings().faults).active
    NO_FAULTS.after_commit("0")
    NO_FAULTS.before_s3_call("put_object")
    NO_FAULTS.before_registry_call()
    assert NO_FAULTS.write("k", lambda: "written") == "written"
    for step in STEPS:
        NO_FAULTS.at_step(step, "0")


def test_a_crash_after_commit_exits_as_a_killed_process_would() -> None:
    faults = FaultInjector(FaultSettings(crash_after_commit_p=1.0), exit=crash)
    with pytest.raises(Crashed) as info:
        faults.after_commit("000000000007")
    assert info.value.args == (CRASH_EXIT_CODE,)


def test_a_task_failure_after_commit_fails_a_first_try_only() -> None:
    faults = FaultInjector(FaultSettings(fail_task_after_commit_p=1.0), exit=crash)
    assert faults.active
    with pytest.raises(InjectedTaskFailure, match="000000000007"):
        faults.after_commit("000000000007")
    faults.after_commit("000000000007", first_try=False)  # a retry or a replay goes on


@pytest.mark.parametrize("step", [s for s in STEPS if s != "returned"])
def test_a_crash_at_a_step_strikes_at_that_step_only(step: str) -> None:
    faults = FaultInjector(FaultSettings.model_validate({"crash_at_step": step}), exit=crash)
    for other in STEPS:
        if other not in (step, "returned"):
            faults.at_step(other, "000000000003")  # no crash
    with pytest.raises(Crashed) as info:
        faults.at_step(step, "000000000003")
    assert info.value.args == (CRASH_EXIT_CODE,)


def test_a_crash_for_streaming_batches_only_lets_a_retry_pass_reach_its_step() -> None:
    settings = FaultSettings(crash_at_step="registered", crash_streaming_only=True)
    faults = FaultInjector(settings, exit=crash)
    faults.at_step("registered", "retry-000000000002")  # a retry pass: no crash
    with pytest.raises(Crashed):
        faults.at_step("registered", "000000000003")


def test_a_crash_once_returned_strikes_after_the_call_returns() -> None:
    crashed = threading.Event()
    codes: list[int] = []

    def exit_later(code: int) -> NoReturn:
        codes.append(code)
        crashed.set()
        threading.Event().wait()  # as if the process had gone: this thread ends nowhere
        raise AssertionError("unreachable")

    faults = FaultInjector(FaultSettings(crash_at_step="returned"), exit=exit_later)
    faults.at_step("settled", "000000000004")
    faults.at_step("returned", "000000000004")  # returns: Spark has yet to commit
    assert crashed.wait(5) and codes == [CRASH_EXIT_CODE]


def test_a_crash_mid_write_starts_the_write_then_exits() -> None:
    started = []
    faults = FaultInjector(FaultSettings(crash_mid_write_p=1.0), exit=crash)
    with pytest.raises(Crashed):
        faults.write("joined/x", lambda: started.append(True))
    assert started == [True]


def test_s3_errors_are_transient_timeouts_and_delays_wait() -> None:
    waits: list[float] = []
    faults = FaultInjector(
        FaultSettings(s3_error_p=1.0, s3_delay_s=0.5, registry_delay_s=0.25), sleep=waits.append
    )
    with pytest.raises(ConnectTimeoutError) as info:
        faults.before_s3_call("put_object")
    assert _transient(info.value)  # the store's bounded retries take it
    faults.before_registry_call()
    assert waits == [0.5, 0.25]


def test_the_same_seed_strikes_at_the_same_opportunities() -> None:
    def strikes(seed: int) -> list[bool]:
        faults = FaultInjector(FaultSettings(s3_error_p=0.3, seed=seed))
        hits = []
        for _ in range(50):
            try:
                faults.before_s3_call("get_object")
                hits.append(False)
            except ConnectTimeoutError:
                hits.append(True)
        return hits

    assert strikes(7) == strikes(7) and any(strikes(7)) and not all(strikes(7))


@pytest.mark.parametrize("name", ["crash_after_commit_p", "crash_mid_write_p", "s3_error_p"])
def test_probabilities_outside_zero_to_one_are_rejected(name: str) -> None:
    with pytest.raises(SettingsError, match=f"faults.{name}"):
        load_settings(faults={name: 1.5})
