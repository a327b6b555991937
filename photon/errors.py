"""The root of Photon's own errors.

Every error a Photon module raises on purpose derives from :class:`PhotonError`
(the IdRegistry's from :class:`registry.errors.RegistryError`, its own root: the
registry package imports nothing of Photon). Each also keeps the built-in base
it had (``ValueError`` for bad input, ``RuntimeError`` for a state that stops
the work), so ``except ValueError`` still means what it did. The CLI prints
either root as one line and exits with status 2 (photon.tooling.cli.main).
"""

from __future__ import annotations


class PhotonError(Exception):
    """Base of every error Photon raises on purpose; its message says what to do."""
