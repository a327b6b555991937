"""Growing-log reader: complete lines from saved per-file byte offsets.

The reader's position is a mapping ``file name -> byte offset of the next
unread byte`` for the log files of one directory (file names are relative to
it; a file missing from the mapping starts at 0). :meth:`GrowingLogReader.read`
returns every complete line after those offsets, each with the offset where
it starts, plus the new mapping. Save the mapping wherever the caller commits
its progress (the Spark checkpoint, later); a reader started from a saved
mapping returns each complete line exactly once, in file order.

How it fails, and what it does instead:

* a partial last line (no ``\\n`` yet) is not returned and its bytes are not
  consumed: the next read picks the line up once it is complete;
* a file shorter than its saved offset was truncated or replaced: the bytes in
  between are gone, so the reader reports a ``file_truncated`` quarantine
  record and continues from the file's present end (never re-reading lines);
* files that appear later are picked up, in name order, on the next read.

Admission control: ``max_bytes`` and ``max_files`` bound one read; a read
always makes progress (at least one line, if any is complete).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from photon.events.records import QuarantineReason, QuarantineRecord

Offsets = dict[str, int]

_CHUNK_BYTES = 1 << 20


@dataclass(frozen=True, slots=True)
class LogLine:
    """One complete line: ``raw`` without its ``\\n``, starting at ``offset`` in ``file``."""

    file: str
    offset: int
    raw: bytes

    @property
    def end(self) -> int:
        """Offset just after this line's newline: where the next read resumes."""
        return self.offset + len(self.raw) + 1


@dataclass(slots=True)
class ReadResult:
    lines: list[LogLine]
    offsets: Offsets
    truncations: list[QuarantineRecord] = field(default_factory=list)

    @property
    def bytes_read(self) -> int:
        return sum(len(line.raw) + 1 for line in self.lines)


class GrowingLogReader:
    def __init__(self, directory: Path, *, pattern: str = "*.log") -> None:
        self.directory = directory
        self.pattern = pattern

    def files(self) -> list[str]:
        """Names of the log files present now, in name (= writing) order."""
        if not self.directory.is_dir():
            return []
        return sorted(p.name for p in self.directory.glob(self.pattern) if p.is_file())

    def read(
        self,
        start: Mapping[str, int] | None = None,
        *,
        max_bytes: int | None = None,
        max_files: int | None = None,
    ) -> ReadResult:
        """Read the complete lines after ``start``; see the module docstring."""
        if max_bytes is not None and max_bytes <= 0:
            raise ValueError(f"max_bytes must be positive, got {max_bytes}")
        if max_files is not None and max_files <= 0:
            raise ValueError(f"max_files must be positive, got {max_files}")
        offsets: Offsets = dict(start or {})
        result = ReadResult(lines=[], offsets=offsets)
        files_read = 0
        consumed = 0
        for name in self.files():
            offset = offsets.get(name, 0)
            if offset < 0:
                raise ValueError(f"saved offset {offset} of {name} is negative")
            size = (self.directory / name).stat().st_size
            if size < offset:
                result.truncations.append(
                    QuarantineRecord(
                        file=name,
                        offset=size,
                        reason=QuarantineReason.FILE_TRUNCATED,
                        detail=f"file shrank to {size} bytes below the saved offset {offset}; "
                        f"{offset - size} bytes were lost",
                    )
                )
                offsets[name] = size
                continue
            if size == offset:
                offsets.setdefault(name, offset)
                continue
            if max_files is not None and files_read >= max_files:
                break
            budget = None if max_bytes is None else max_bytes - consumed
            if budget is not None and budget <= 0 and result.lines:
                break
            lines = _read_complete_lines(self.directory / name, name, offset, budget)
            files_read += 1
            if lines:
                result.lines.extend(lines)
                offsets[name] = lines[-1].end
                consumed += lines[-1].end - offset
            else:
                offsets.setdefault(name, offset)
        return result


def _read_complete_lines(path: Path, name: str, offset: int, budget: int | None) -> list[LogLine]:
    """Complete lines of ``path`` from ``offset``; stop once ``budget`` bytes are taken.

    A budget of None or <= 0 still takes one line, so every read makes progress.
    """
    lines: list[LogLine] = []
    taken = 0
    with path.open("rb") as f:
        f.seek(offset)
        pending = b""  # bytes of a line whose newline has not been read yet
        pending_at = offset
        while True:
            chunk = f.read(_CHUNK_BYTES)
            if not chunk:
                return lines  # what is left in `pending` is a partial last line
            data = pending + chunk
            start = 0
            while (newline := data.find(b"\n", start)) >= 0:
                lines.append(LogLine(name, pending_at + start, data[start:newline]))
                taken += newline + 1 - start
                start = newline + 1
                if budget is not None and taken >= budget:
                    return lines
            pending = data[start:]
            pending_at += start
