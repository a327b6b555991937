"""The suite's own rule: a test without a kind marker fails collection."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[2]


def test_an_unmarked_test_is_rejected(tmp_path: Path) -> None:
    (tmp_path / "conftest.py").write_text(
        "from tests.conftest import pytest_collection_modifyitems  # noqa: F401\n"
    )
    (tmp_path / "test_unmarked.py").write_text("def test_something():\n    assert 1 + 1 == 2\n")
    (tmp_path / "test_marked.py").write_text(
        "import pytest\n\n@pytest.mark.unit\ndef test_fine():\n    assert True\n"
    )
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
    )
    output = result.stdout + result.stderr
    assert result.returncode == 4, output  # pytest's exit status for a usage error
    assert "test_unmarked.py::test_something: no kind" in output
    assert "test_marked.py::test_fine" not in output  # only the offender is named
