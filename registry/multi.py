"""A ZooKeeper ``multi`` of version checks and creates, put on the wire in one pass.

This is what :meth:`IdRegistry.register` commits: a few ``check`` ops (the
sharding config, a fence, GC boundaries), then up to ``max_ops_per_txn``
creates of id znodes, all with the client's ACL and no flags. kazoo's
``TransactionRequest`` builds such a multi op by op: each ``create`` checks
its arguments, normalizes its path and makes a ``Create`` tuple, and the
connection thread then makes a header tuple for each op and joins a dozen small
byte strings per op. For a multi of 1,000 creates that is ~14 µs an op on this
project's 2-core machine, two fifths of a registered id's CPU in the client
(docs/join.md, "Where a group task's time goes"). Here the ACL and flags are
encoded once per multi and each op is one ``bytes`` built from its path and
data, byte for byte what kazoo would send (the unit tests compare the two).

The request is kazoo's own ``Transaction`` type (request type 14), so kazoo's
connection sends it, parses the answer (one result per op: ``True`` for a
check, the path for a create, an exception *instance* for the op that failed
and ``RolledBackError``/``RuntimeInconsistency`` for the rest) and strips a
chroot from it, as for any multi.

How it fails: a path that is not absolute and normalized (kazoo would
normalize it; these are built by :class:`registry.paths.Layout`, so it is a
caller error) raises ``ValueError`` before anything is sent; a client that is
closed or whose session expired fails the returned result, as kazoo's
``commit_async`` does; everything else is the multi's own outcome.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from kazoo.client import KazooClient
from kazoo.protocol.paths import normpath
from kazoo.protocol.serialization import (
    CheckVersion,
    Create,
    Transaction,
    int_struct,
    multiheader_struct,
)
from kazoo.security import ACL, OPEN_ACL_UNSAFE

_CHECK_HEADER = multiheader_struct.pack(CheckVersion.type, False, -1)
_CREATE_HEADER = multiheader_struct.pack(Create.type, False, -1)
_DONE = multiheader_struct.pack(-1, True, -1)
_LENGTH: Callable[[int], bytes] = int_struct.pack  # as jute writes one: a big-endian int32


class _WireMulti(Transaction):  # type: ignore[misc]  # kazoo's untyped namedtuple
    """A multi whose ``operations`` are its ops already encoded, headers included."""

    __slots__ = ()

    def serialize(self) -> bytes:
        ops: list[bytes] = self.operations
        return b"".join([*ops, _DONE])


def _string(text: str) -> bytes:
    data = text.encode("utf-8")
    return _LENGTH(len(data)) + data


def acl_and_flags(acl: Sequence[ACL]) -> bytes:
    """What follows a create's data: its ACL list and flags 0 (a persistent node)."""
    parts = [_LENGTH(len(acl))]
    for entry in acl:
        parts.append(int_struct.pack(entry.perms) + _string(entry.id.scheme) + _string(entry.id.id))
    parts.append(int_struct.pack(0))
    return b"".join(parts)


def check_path(path: str) -> str:
    """``path`` if kazoo would send it unchanged (absolute, normalized), else ``ValueError``."""
    try:
        normal = path.startswith("/") and normpath(path) == path
    except ValueError:  # kazoo refuses "." and ".." components
        normal = False
    if not normal:
        raise ValueError(f"{path!r} is not an absolute, normalized znode path")
    return path


class MultiBuilder:
    """Encodes the ops of one multi for ``client``; :meth:`commit_async` sends them.

    ``create`` takes a parent that :func:`check_path` accepted (the caller checks
    each bucket once, not each id) and a child name without ``/``.
    """

    def __init__(self, client: KazooClient) -> None:
        self._client = client
        self._chroot: str = client.chroot or ""
        self._tail = acl_and_flags(client.default_acl or OPEN_ACL_UNSAFE)
        self._ops: list[bytes] = []

    def check(self, path: str, version: int) -> None:
        self._ops.append(
            _CHECK_HEADER + _string(self._chroot + check_path(path)) + int_struct.pack(version)
        )

    def create(self, parent: str, name: str, data: bytes) -> None:
        if "/" in name or name in ("", ".", ".."):
            raise ValueError(f"{name!r} is not a znode name")
        path = f"{self._chroot}{parent}/{name}".encode()
        self._ops.append(
            b"".join(
                (_CREATE_HEADER, _LENGTH(len(path)), path, _LENGTH(len(data)), data, self._tail)
            )
        )

    def request(self) -> Transaction:
        """The multi as kazoo's connection sends it (its ``serialize()``: the wire bytes)."""
        return _WireMulti(self._ops)

    def commit_async(self) -> Any:
        """Send the multi; the result is kazoo's, as from ``TransactionRequest.commit_async``."""
        async_object = self._client.handler.async_result()
        self._client._call(self.request(), async_object)  # what commit_async does
        return async_object
