"""Growing-log writer: append-only JSON Lines files that roll over at a size limit.

Files are ``<directory>/<name>.<seq>.log`` with a zero-padded sequence number,
so sorting names gives the writing order. Each line goes out whole in a
single ``write`` on an ``O_APPEND`` descriptor, newline included (with the lines
after it, for :meth:`GrowingLogWriter.append_many`): a line exists once its
``\\n`` is written, and a reader never takes the bytes before it for a line.

A writer that is opened again on the same directory and name continues the
newest file; it never rewrites bytes. A line that would take a non-empty file
past ``max_bytes`` starts the next file instead (a single line longer than
``max_bytes`` still gets a file of its own).

How it fails: a line with a newline in it, a bad log name or size raise
``ValueError`` before anything is written; a short write raises ``OSError``
(the disk is full): the line then has no newline, and readers skip it as torn.
"""

from __future__ import annotations

import os
import re
from collections.abc import Sequence
from pathlib import Path
from types import TracebackType
from typing import Self

_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
_SEQ_DIGITS = 6


def log_file_name(name: str, seq: int) -> str:
    return f"{name}.{seq:0{_SEQ_DIGITS}d}.log"


def _ends_mid_line(path: Path) -> bool:
    try:
        with path.open("rb") as f:
            if f.seek(0, os.SEEK_END) == 0:
                return False
            f.seek(-1, os.SEEK_END)
            return f.read(1) != b"\n"
    except FileNotFoundError:
        return False


class GrowingLogWriter:
    def __init__(self, directory: Path, name: str, *, max_bytes: int) -> None:
        if not _NAME.fullmatch(name):
            raise ValueError(f"log name {name!r} must match {_NAME.pattern}")
        if max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        self.directory = directory
        self.name = name
        self.max_bytes = max_bytes
        directory.mkdir(parents=True, exist_ok=True)
        self._fd: int | None = None
        self._seq = 0
        self._path = self.directory / log_file_name(name, 0)
        self._size = 0
        seq = self._newest_seq()
        # A crash mid-write can leave a partial last line; appending after it would
        # glue two lines together, so such a file is left as it is.
        self._open(seq + 1 if _ends_mid_line(self.directory / log_file_name(name, seq)) else seq)

    @property
    def current_file(self) -> Path:
        return self._path

    def append(self, line: bytes) -> tuple[Path, int]:
        """Append one line (without its newline); return (file, byte offset of the line)."""
        return self.append_many([line])[0]

    def append_many(self, lines: Sequence[bytes]) -> list[tuple[Path, int]]:
        """Append ``lines`` in order, as :meth:`append` each would (the same files and
        offsets), with one ``write`` a file rather than one a line: an ad server's
        writes of a moment at once (a live stream of thousands of lines a second spent
        most of its CPU in them)."""
        if any(b"\n" in line for line in lines):
            raise ValueError("a log line must not contain a newline")
        placed: list[tuple[Path, int]] = []
        pending: list[bytes] = []
        size = self._size  # the file's, with the pending lines
        for line in lines:
            data_size = len(line) + 1
            if size > 0 and size + data_size > self.max_bytes:
                self._write(pending)
                pending = []
                self._open(self._seq + 1)
                size = self._size
            placed.append((self._path, size))
            pending.append(line)
            size += data_size
        self._write(pending)
        return placed

    def _write(self, lines: list[bytes]) -> None:
        if not lines:
            return
        assert self._fd is not None
        data = b"\n".join(lines) + b"\n"
        written = os.write(self._fd, data)
        if written != len(data):  # a regular file only writes short on a full disk
            raise OSError(f"short write to {self.current_file}: {written} of {len(data)} bytes")
        self._size += written

    def close(self) -> None:
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def _newest_seq(self) -> int:
        pattern = re.compile(rf"{re.escape(self.name)}\.(\d{{{_SEQ_DIGITS}}})\.log")
        seqs = [
            int(m.group(1)) for p in self.directory.iterdir() if (m := pattern.fullmatch(p.name))
        ]
        return max(seqs, default=0)

    def _open(self, seq: int) -> None:
        self.close()
        self._seq = seq
        # Made once a file, not once a line: a Path a line was most of append's CPU.
        self._path = self.directory / log_file_name(self.name, seq)
        self._fd = os.open(self._path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o644)
        self._size = os.fstat(self._fd).st_size
