"""``photon cluster``: bad input is refused before any JVM starts."""

from __future__ import annotations

import pytest
from typer.testing import CliRunner

from photon.tooling.cli.main import app

pytestmark = pytest.mark.unit


@pytest.mark.parametrize(
    "args",
    [
        ["worker", "http://spark-master:7077"],
        ["worker", "spark://spark-master"],
        ["worker", "spark://spark-master:7077", "--cores", "0"],
        ["master", "--port", "70000"],
    ],
)
def test_bad_arguments_exit_2_with_the_reason(args: list[str]) -> None:
    result = CliRunner().invoke(app, ["cluster", *args])
    assert result.exit_code == 2, result.output
