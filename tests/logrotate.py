"""logrotate's two ways of rotating a log, for the tests of files followed by identity."""

from __future__ import annotations

import shutil
from pathlib import Path

#: ``rename``: ``x.log`` becomes ``x.log.1`` (the writer starts a new ``x.log``);
#: ``copytruncate``: ``x.log`` is copied to ``x.log.1``, then truncated and written on.
ROTATIONS = ("rename", "copytruncate")


def rotate(path: Path, how: str) -> Path:
    """Rotate ``path`` to ``<name>.1`` the way ``how`` says; the rotated file's path."""
    rotated = path.with_name(f"{path.name}.1")
    if how == "rename":
        path.rename(rotated)
    elif how == "copytruncate":
        shutil.copyfile(path, rotated)
        with path.open("r+b") as cut:
            cut.truncate(0)
    else:
        raise ValueError(f"rotation must be one of {', '.join(ROTATIONS)}, not {how!r}")
    return rotated
