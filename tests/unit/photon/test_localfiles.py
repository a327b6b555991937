"""The last lines of a log, as error messages show them."""

from __future__ import annotations

from pathlib import Path

import pytest

from photon.localfiles import last_lines

pytestmark = pytest.mark.unit


def test_the_last_lines_of_a_log_for_an_error_message(tmp_path: Path) -> None:
    log = tmp_path / "app.log"
    log.write_bytes(b"".join(b"line %d\n" % n for n in range(40)) + b"bad \xff byte\n")
    assert last_lines(log, 2) == "line 39\nbad \ufffd byte"
    assert last_lines(tmp_path / "none.log") == ""  # no log yet: nothing to show
    assert last_lines(tmp_path).startswith(f"(cannot read {tmp_path}")  # a directory
