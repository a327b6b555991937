"""When a driver's launch names the class archive and its jar copies (no JVM started),
and how the copies are made."""

from __future__ import annotations

import sys
import zipfile
from pathlib import Path

import pyspark
import pytest

from spark_apps.class_archive import (
    archive_path,
    class_archive_conf,
    signed_jars,
    unsigned_jars_dir,
    write_unsigned_copy,
)

pytestmark = pytest.mark.unit

OPTIONS = "-XX:TieredStopAtLevel=1 -XX:+UseSerialGC"
JAVA_OPTIONS = "spark.driver.extraJavaOptions"
CLASS_PATH = "spark.driver.extraClassPath"


def built(tmp_path: Path, *jar_names: str) -> Path:
    """An archive as a build leaves it: the file, and its jar copies beside it."""
    archive = tmp_path / "driver.jsa"
    archive.write_bytes(b"classes")
    copies = unsigned_jars_dir(archive)
    copies.mkdir()
    for name in jar_names:
        (copies / name).write_bytes(b"jar")
    return archive


def test_the_archive_lives_in_the_installation_named_by_the_pyspark_version() -> None:
    path = archive_path()
    assert path.is_relative_to(sys.prefix)
    assert pyspark.__version__ in path.name and path.suffix == ".jsa"
    assert unsigned_jars_dir().parent == path.parent


def test_an_archive_that_is_there_is_named_with_its_jar_copies_first_on_the_class_path(
    tmp_path: Path,
) -> None:
    archive = built(tmp_path, "janino.jar", "commons-compiler.jar")
    copies = unsigned_jars_dir(archive)
    assert class_archive_conf(OPTIONS, path=archive) == {
        JAVA_OPTIONS: f"{OPTIONS} -XX:SharedArchiveFile={archive}",
        CLASS_PATH: f"{copies / 'commons-compiler.jar'}:{copies / 'janino.jar'}",
    }
    assert class_archive_conf("", path=archive)[JAVA_OPTIONS] == f"-XX:SharedArchiveFile={archive}"


def test_a_build_that_copied_no_jar_adds_nothing_to_the_class_path(tmp_path: Path) -> None:
    archive = built(tmp_path)
    assert class_archive_conf(OPTIONS, path=archive) == {
        JAVA_OPTIONS: f"{OPTIONS} -XX:SharedArchiveFile={archive}"
    }


def test_a_missing_or_switched_off_archive_leaves_the_options_as_they_are(tmp_path: Path) -> None:
    archive = tmp_path / "driver.jsa"
    assert class_archive_conf(OPTIONS, path=archive) == {JAVA_OPTIONS: OPTIONS}
    archive = built(tmp_path, "janino.jar")
    assert class_archive_conf(OPTIONS, enabled=False, path=archive) == {JAVA_OPTIONS: OPTIONS}


def test_an_archive_without_its_jar_copies_is_not_used(tmp_path: Path) -> None:
    # it was made for a class path that starts with them: the JVM would refuse it
    archive = built(tmp_path, "janino.jar")
    for jar in unsigned_jars_dir(archive).iterdir():
        jar.unlink()
    unsigned_jars_dir(archive).rmdir()
    assert class_archive_conf(OPTIONS, path=archive) == {JAVA_OPTIONS: OPTIONS}


def test_a_path_with_a_space_is_not_passed_to_a_jvm_that_splits_options_at_spaces(
    tmp_path: Path,
) -> None:
    (tmp_path / "my venv").mkdir()
    archive = built(tmp_path / "my venv", "janino.jar")
    assert class_archive_conf(OPTIONS, path=archive) == {JAVA_OPTIONS: OPTIONS}


def a_jar(path: Path, *signature_files: str) -> Path:
    with zipfile.ZipFile(path, "w") as jar:
        jar.writestr("META-INF/MANIFEST.MF", "Manifest-Version: 1.0\n")
        jar.writestr("org/example/Compiler.class", b"\xca\xfe\xba\xbe")
        jar.writestr("META-INF/maven/pom.properties", "version=1\n")
        for name in signature_files:
            jar.writestr(name, b"signature")
    return path


def test_the_copy_of_a_signed_jar_is_the_jar_without_its_signature_files(tmp_path: Path) -> None:
    jars, copies = tmp_path / "jars", tmp_path / "copies"
    jars.mkdir()
    copies.mkdir()
    signed = a_jar(jars / "janino.jar", "META-INF/DUMMY.SF", "META-INF/DUMMY.DSA")
    a_jar(jars / "plain.jar")
    a_jar(jars / "rsa.jar", "META-INF/KEY.RSA", "META-INF/KEY.SF")
    assert signed_jars(jars) == [signed, jars / "rsa.jar"]

    copy = write_unsigned_copy(signed, copies)
    assert copy == copies / "janino.jar"
    with zipfile.ZipFile(copy) as jar:
        assert sorted(jar.namelist()) == [
            "META-INF/MANIFEST.MF",
            "META-INF/maven/pom.properties",
            "org/example/Compiler.class",
        ]
        assert jar.read("org/example/Compiler.class") == b"\xca\xfe\xba\xbe"
    assert signed_jars(copies) == []


def test_pyspark_signs_janinos_jars() -> None:
    # if a PySpark stops signing them, the copies are no longer needed (nor made)
    names = [jar.name for jar in signed_jars(Path(pyspark.__file__).parent / "jars")]
    assert any(name.startswith("janino-") for name in names), names
