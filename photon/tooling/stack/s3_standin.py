"""The native stack's S3 stand-in: moto's server, with its writes made atomic.

``python -m photon.tooling.stack.s3_standin -H HOST -p PORT`` serves moto's S3 as
``moto.server`` does, with one difference: requests that change objects (``PUT``,
``POST``, ``DELETE``) run one at a time. moto answers a conditional put
(``If-None-Match: *``, the pipelines' write-once) by looking the key up and then
storing the object, in a server thread each: two writers of one key could both pass
the look-up and the second overwrite the first. Real S3 and MinIO decide it
atomically; here one lock around every write does (reads stay concurrent). The
stand-in is single-process Python under the GIL, so this costs it little.

How it fails: as ``moto.server`` does (a port in use: the server exits at start).
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import Any

#: The methods that change objects: run one at a time.
WRITES = frozenset({"PUT", "POST", "DELETE"})

Wsgi = Callable[[dict[str, Any], Callable[..., Any]], Iterable[bytes]]


class SerializedWrites:
    """WSGI middleware: one write request at a time, its response made inside the lock."""

    def __init__(self, app: Wsgi) -> None:
        self.app = app
        self.lock = threading.Lock()

    def __call__(self, environ: dict[str, Any], start_response: Callable[..., Any]) -> Any:
        if environ.get("REQUEST_METHOD") not in WRITES:
            return self.app(environ, start_response)
        with self.lock:  # the body is produced here too: the write is done when it ends
            response = self.app(environ, start_response)
            try:
                return [b"".join(response)]
            finally:
                close = getattr(response, "close", None)
                if close is not None:
                    close()


def main(argv: Sequence[str] | None = None) -> None:
    from moto.moto_server.werkzeug_app import (
        DomainDispatcherApplication,
        MotoRequestHandler,
        create_backend_app,
    )
    from werkzeug.serving import run_simple

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-H", "--host", default="127.0.0.1")
    parser.add_argument("-p", "--port", type=int, required=True)
    args = parser.parse_args(argv)
    app = SerializedWrites(DomainDispatcherApplication(create_backend_app))
    run_simple(args.host, args.port, app, threaded=True, request_handler=MotoRequestHandler)


if __name__ == "__main__":
    main()
