"""When a driver's JVM options name the class archive (no JVM started)."""

from __future__ import annotations

import sys
from pathlib import Path

import pyspark
import pytest

from spark_apps.class_archive import archive_path, with_class_archive

pytestmark = pytest.mark.unit

OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"


def test_the_archive_lives_in_the_installation_named_by_the_pyspark_version() -> None:
    path = archive_path()
    assert path.is_relative_to(sys.prefix)
    assert pyspark.__version__ in path.name and path.suffix == ".jsa"


def test_an_archive_that_is_there_is_named_after_the_settings_options(tmp_path: Path) -> None:
    archive = tmp_path / "driver.jsa"
    archive.write_bytes(b"classes")
    assert with_class_archive(OPTIONS, path=archive) == f"{OPTIONS} -XX:SharedArchiveFile={archive}"
    assert with_class_archive("", path=archive) == f"-XX:SharedArchiveFile={archive}"


def test_a_missing_or_switched_off_archive_leaves_the_options_as_they_are(tmp_path: Path) -> None:
    archive = tmp_path / "driver.jsa"
    assert with_class_archive(OPTIONS, path=archive) == OPTIONS
    archive.write_bytes(b"classes")
    assert with_class_archive(OPTIONS, enabled=False, path=archive) == OPTIONS


def test_a_path_with_a_space_is_not_passed_to_a_jvm_that_splits_options_at_spaces(
    tmp_path: Path,
) -> None:
    archive = tmp_path / "my venv" / "driver.jsa"
    archive.parent.mkdir()
    archive.write_bytes(b"classes")
    assert with_class_archive(OPTIONS, path=archive) == OPTIONS
