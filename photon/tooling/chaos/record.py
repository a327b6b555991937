"""What the chaos run keeps of each fault it injected (:class:`FaultRecord`)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any


@dataclass
class FaultRecord:
    kind: str
    target: str
    at_s: float = 0.0  # since the stream started
    ended_s: float | None = None
    affects: list[str] = field(default_factory=list)  # the DCs whose output it stops
    struck: bool = True  # False: it missed (no process to kill, no crash happened)
    recovered_s: float | None = None  # from its end until each of them joins again
    detail: dict[str, Any] = field(default_factory=dict)
