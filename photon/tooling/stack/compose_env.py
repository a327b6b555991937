"""The compose stack's ``.env``: ``.env.example`` with every empty value a fresh secret.

``.env.example`` (committed) holds no secret: each secret's line is ``NAME=``
with nothing after it. :func:`render` fills those, and only those, with random
values: URL-safe (they go into connection URLs), and for ``*FERNET_KEY`` the
32-byte url-safe base64 key Airflow's Fernet needs. How it fails: an existing
``.env`` is never overwritten (its secrets may already be in MinIO, ZooKeeper's
ACLs and PostgreSQL): :func:`write` raises :class:`FileExistsError`.
"""

from __future__ import annotations

import base64
import os
import re
import secrets
from pathlib import Path

_ASSIGNMENT = re.compile(r"^(?P<name>[A-Z][A-Z0-9_]*)=(?P<value>.*)$")


def secret_names(example: str) -> list[str]:
    """The variables ``.env.example`` leaves empty: the secrets."""
    names = []
    for line in example.splitlines():
        match = _ASSIGNMENT.match(line.strip())
        if match and not match["value"]:
            names.append(match["name"])
    return names


def new_secret(name: str) -> str:
    if name.endswith("FERNET_KEY"):
        return base64.urlsafe_b64encode(os.urandom(32)).decode()
    return secrets.token_urlsafe(24)


def render(example: str) -> str:
    """``example`` with each empty value replaced by a new secret; all else as it was."""
    lines = []
    for line in example.splitlines():
        match = _ASSIGNMENT.match(line.strip())
        if match and not match["value"]:
            line = f"{match['name']}={new_secret(match['name'])}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def write(example_path: Path, env_path: Path) -> list[str]:
    """Write ``env_path`` (owner-only) from ``example_path``; the names of the secrets made."""
    if env_path.exists():
        raise FileExistsError(f"{env_path} exists; delete it first to make new secrets")
    example = example_path.read_text()
    fd = os.open(env_path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w") as out:
        out.write(render(example))
    return secret_names(example)
