"""The native stack's S3 stand-in: moto's server, with its writes made atomic.

``python -m photon.tooling.stack.s3_standin -H HOST -p PORT`` serves moto's S3 as
``moto.server`` does, with one difference: requests that change objects (``PUT``,
``POST``, ``DELETE``) run one at a time. moto answers a conditional put
(``If-None-Match: *``, the pipelines' write-once) by looking the key up and then
storing the object, in a server thread each: two writers of one key could both pass
the look-up and the second overwrite the first. Real S3 and MinIO decide it
atomically; here one lock around every write does (reads stay concurrent). The
stand-in is single-process Python under the GIL, so this costs it little.

In compose, where MinIO's image cannot be had, the stand-in takes MinIO's place
(infra/docker/compose.s3-standin.yml) and :func:`provision` does what MinIO's init
job does: the bucket, and one IAM user per service with its policy. The users and
policies are stored, not enforced: moto accepts any key (MinIO checks them; the
policies themselves are proven against moto with its checks on, in the security
tests).

How it fails: as ``moto.server`` does (a port in use: the server exits at start);
:func:`provision` raises the endpoint's error (unreachable: botocore's).
"""

from __future__ import annotations

import argparse
import threading
from collections.abc import Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from photon.settings import PhotonSettings

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


def provision(endpoint_url: str, settings: PhotonSettings) -> list[str]:
    """The configured bucket and every service's IAM user with its policy, on the
    stand-in at ``endpoint_url``; idempotent. Returns the users' names."""
    import boto3

    from photon.security.s3_access import provision_iam
    from photon.storage import s3_client

    s3 = s3_client(endpoint_url, settings.s3)
    if settings.s3.bucket not in {b["Name"] for b in s3.list_buckets().get("Buckets", [])}:
        s3.create_bucket(Bucket=settings.s3.bucket)
    iam = boto3.client(
        "iam",
        endpoint_url=endpoint_url,
        region_name=settings.s3.region,
        aws_access_key_id=settings.s3.access_key,
        aws_secret_access_key=settings.s3.secret_key.get_secret_value(),
    )
    existing = {u["UserName"] for u in iam.list_users()["Users"]}
    if not any(name.startswith("photon-") for name in existing):
        provision_iam(iam, settings.s3.bucket, settings.dcs)
    return sorted(u["UserName"] for u in iam.list_users()["Users"])


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
