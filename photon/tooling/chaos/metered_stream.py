"""A chaos fault's stream metered to one joiner: held while that joiner has clicks to read.

A fault whose armed joiner must win clicks to strike (a crash at a step of a
batch, a pause between a commit and its write) waits for it with the stream
flowing. On a slow machine each such run takes minutes of Spark restarts and
batches, and a stream left to flow meanwhile ran its whole length before the
later faults came: they had no new click to win, and missed. Metered
(:class:`MeteredStream`), the stream flows only while the joiner has read all it
was given, and is held while it has unread click bytes: it advances at the
joiner's pace, however slow the machine, and what it wrote is there to be won.

The hold is one of the :class:`~photon.tooling.runs.StreamClock`'s nested ones,
so a fault beside it holding the stream keeps it held.

How it fails: a backlog that cannot be read (a checkpoint being written) counts
as unread clicks, and is read again at the next check; the meter never raises
into the fault, and on exit the stream is left as the other holders have it.
"""

from __future__ import annotations

import threading
from collections.abc import Callable

import structlog

from photon.join.backlog import joiner_backlog
from photon.settings import PhotonSettings
from photon.tooling.runs import StreamClock

log = structlog.get_logger(__name__)


class MeteredStream:
    """Within it, the stream is held whenever ``unread()`` (by default ``dc``'s
    joiner's unread click-log bytes) is above zero, and flows when it is zero."""

    def __init__(
        self,
        clock: StreamClock,
        settings: PhotonSettings,
        dc: str,
        check_s: float = 0.25,
        unread: Callable[[], int] | None = None,
    ) -> None:
        self._clock = clock
        self._dc = dc
        self._check_s = check_s
        self._unread = unread or (lambda: joiner_backlog(settings, dc).bytes)
        self._done = threading.Event()
        self._holding = False
        self._thread = threading.Thread(
            target=self._meter, name=f"metered stream {dc}", daemon=True
        )

    def __enter__(self) -> MeteredStream:
        self._thread.start()
        return self

    def __exit__(self, *_: object) -> None:
        self._done.set()
        self._thread.join()
        if self._holding:
            self._clock.resume()
            self._holding = False

    def _meter(self) -> None:
        while not self._done.is_set():
            try:
                behind = self._unread() > 0
            except Exception as exc:  # the fault goes on: read again at the next check
                log.debug("chaos.metered_stream_unreadable", dc=self._dc, error=str(exc))
                behind = True
            if behind and not self._holding:
                self._clock.hold()
                self._holding = True
            elif not behind and self._holding:
                self._clock.resume()
                self._holding = False
            self._done.wait(self._check_s)


__all__ = ["MeteredStream"]
