"""Rewrite a hashed lock compiled with ``uv pip compile --no-strip-extras`` so that pip's
hash-checking mode installs it: each entry pinned with extras (``uvicorn[standard]==0.54.0``)
is given twice, as itself and without its extras, with the same hashes.

pip's hash-checking mode (the images' installer, docs/deploy.md, "What each image
installs") takes a dependency's request for ``uvicorn[standard]`` and another's for
``uvicorn`` as two requirements: one the lock does not pin by name is unpinned, pip
tries the index's newest release for it, and refuses the whole install. Usage:
``python infra/lock_with_extras.py locks/airflow.txt`` (rewrites the file in place).
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

_EXTRAS = re.compile(r"^([A-Za-z0-9][A-Za-z0-9._-]*)\[[^\]]+\](==.*)$", re.S)


def with_plain_twins(text: str) -> str:
    lines = text.rstrip("\n").split("\n")
    header = 0
    while header < len(lines) and lines[header].startswith("#"):
        header += 1  # uv's header: what made the file
    entries = re.split(r"\n(?=[A-Za-z0-9])", "\n".join(lines[header:]))
    plain = {entry.split("==", 1)[0] for entry in entries}
    out = lines[:header]
    for entry in entries:
        match = _EXTRAS.match(entry)
        if match and match.group(1) not in plain:
            out.append(match.group(1) + match.group(2))
        out.append(entry)
    return "\n".join(out) + "\n"


def main(paths: list[str]) -> int:
    for path in map(Path, paths):
        path.write_text(with_plain_twins(path.read_text()))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
