"""One root for the errors Photon raises on purpose, one for the IdRegistry's, and the
CLI turning either into one line (photon.errors)."""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import sys

import pytest

import photon
import registry
from photon.errors import PhotonError
from registry.errors import RegistryError

pytestmark = pytest.mark.unit

#: Modules run as scripts (``python -m``), not imported.
_SKIP = ("photon.__main__",)


def defined_errors(package: object, root: str) -> list[type[BaseException]]:
    found = []
    for info in pkgutil.walk_packages(package.__path__, f"{root}."):  # type: ignore[attr-defined]
        if info.name.startswith(_SKIP):
            continue
        module = importlib.import_module(info.name)
        for _, value in inspect.getmembers(module, inspect.isclass):
            if issubclass(value, BaseException) and value.__module__ == info.name:
                found.append(value)
    return found


def test_every_photon_error_derives_from_photon_error() -> None:
    errors = defined_errors(photon, "photon")
    assert len(errors) >= 15
    assert [e.__name__ for e in errors if not issubclass(e, PhotonError)] == []


def test_every_registry_error_derives_from_registry_error() -> None:
    errors = defined_errors(registry, "registry")
    names = {e.__name__ for e in errors}
    assert names >= {"InvalidEventIdError", "InvalidTokenError", "InvalidShardingError"}
    assert [e.__name__ for e in errors if not issubclass(e, RegistryError)] == []


def test_errors_keep_their_built_in_base() -> None:
    from photon.settings import SettingsError
    from photon.storage import ObjectStoreError
    from registry import InvalidEventIdError

    assert issubclass(SettingsError, ValueError) and issubclass(InvalidEventIdError, ValueError)
    assert issubclass(ObjectStoreError, RuntimeError)


@pytest.mark.parametrize(
    "error",
    [
        "photon.storage:ObjectStoreError",  # an S3 failure, e.g. in the demo's audit
        "photon.settings:SettingsError",
        "registry.errors:RegistryUnavailableError",
        "registry.ids:InvalidEventIdError",
    ],
)
def test_the_cli_prints_an_error_of_either_root_as_one_line(
    error: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from photon.tooling.cli import main as cli

    module, name = error.split(":")
    kind = getattr(importlib.import_module(module), name)

    def fail(**_: object) -> None:
        raise kind("putObject on s3://photon failed 5 times: connection refused")

    monkeypatch.setattr(cli, "app", fail)
    monkeypatch.setattr(sys, "argv", ["photon", "demo"])
    with pytest.raises(SystemExit) as exit_info:
        cli.main()
    assert exit_info.value.code == 2
    printed = capsys.readouterr().err.strip()
    assert printed == "error: putObject on s3://photon failed 5 times: connection refused"
    assert "Traceback" not in printed
