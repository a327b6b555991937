"""Local files that appear whole: written under a temporary name, then renamed; and the
last lines of a log, for error messages.

A reader sees the old file or the new one, never a part (a rename within one
directory is atomic on POSIX). With ``sync`` the bytes reach the disk before
the rename, for files whose loss after a crash would lose data (recovery logs).
"""

from __future__ import annotations

import os
from pathlib import Path


def write_whole(path: Path, data: bytes, *, sync: bool = False) -> Path:
    """Write ``data`` to ``path`` so that it appears whole; returns ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    with tmp.open("wb") as out:
        out.write(data)
        if sync:
            out.flush()
            os.fsync(out.fileno())
    tmp.replace(path)
    return path


def last_lines(path: Path, lines: int = 15) -> str:
    """The last ``lines`` lines of a text file ("" when there is none; undecodable bytes
    replaced): what an error message shows of a process's log."""
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return ""
    except OSError as exc:
        return f"(cannot read {path}: {exc})"
    return "\n".join(text.splitlines()[-lines:])
