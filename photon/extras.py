"""The optional parts of the install (pyproject.toml's extras), asked for where used.

A DC's apps install the base alone; verification, reports and the local stack's
S3 stand-in come with extras. A command that needs one that is missing fails
with :class:`MissingExtraError`, naming the extra to install, instead of a bare
``ModuleNotFoundError``.
"""

from __future__ import annotations

import importlib.util

from photon.errors import PhotonError


class MissingExtraError(PhotonError, RuntimeError):
    """An optional package is not installed; the message says which extra brings it."""


def require(module: str, extra: str, needed_for: str) -> None:
    if importlib.util.find_spec(module) is None:
        raise MissingExtraError(
            f"{needed_for} needs {module}, which this install lacks: "
            f"pip install 'photon-streams[{extra}]' (make installs every extra)"
        )
