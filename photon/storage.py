"""The object store (S3: MinIO in compose, MinIO or moto on the native stack).

Every object is written with one ``PutObject``, so a reader sees it whole or
not at all. ``put(..., if_absent=True)`` writes only when the key is free:
a replayed micro-batch then leaves the first write in place (see
``docs/join.md``, "Replays").

How it fails: each call is retried with exponential backoff (``tenacity``) on
connection errors, timeouts, throttling and 5xx answers, within
``attempts``; past that :class:`ObjectStoreError` is raised and the caller's
batch fails (Spark retries it). 4xx answers other than "not found" are not
retried: they are our bug or a permission problem.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any

import boto3
import pyarrow as pa
import pyarrow.fs as pafs
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError
from tenacity import (
    RetryError,
    Retrying,
    retry_if_exception,
    stop_after_attempt,
    wait_exponential,
)

from photon.errors import PhotonError
from photon.faults import NO_FAULTS, FaultInjector
from photon.settings import PhotonSettings, S3Settings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client


def s3_client(
    endpoint_url: str, settings: S3Settings, *, timeout_s: float = 5.0, attempts: int = 3
) -> S3Client:
    """A boto3 S3 client for ``endpoint_url`` with bounded timeouts and retries."""
    return boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id=settings.access_key,
        aws_secret_access_key=settings.secret_key.get_secret_value(),
        region_name=settings.region,
        config=Config(
            connect_timeout=timeout_s,
            read_timeout=timeout_s,
            retries={"max_attempts": attempts, "mode": "standard"},
            s3={"addressing_style": "path"},
        ),
    )


#: How long a link to a report stays valid: SigV4's longest, a week.
LINK_EXPIRY_S = 7 * 24 * 3600


def presigned_get_url(
    endpoint_url: str, settings: S3Settings, key: str, *, expires_s: int = LINK_EXPIRY_S
) -> str:
    """A URL a browser can open without credentials to read ``key``, for ``expires_s``,
    signed by ``settings``' keys for ``endpoint_url`` (the address the browser uses: a
    signature holds the host). Made locally: nothing is sent to the endpoint."""
    if not 1 <= expires_s <= LINK_EXPIRY_S:
        raise ValueError(f"expires_s must be within 1..{LINK_EXPIRY_S}, not {expires_s}")
    client = boto3.client(
        "s3",
        endpoint_url=endpoint_url,
        aws_access_key_id=settings.access_key,
        aws_secret_access_key=settings.secret_key.get_secret_value(),
        region_name=settings.region,
        config=Config(signature_version="s3v4", s3={"addressing_style": "path"}),
    )
    url: str = client.generate_presigned_url(
        "get_object", Params={"Bucket": settings.bucket, "Key": key}, ExpiresIn=expires_s
    )
    return url


def browser_url(settings: PhotonSettings, key: str) -> str:
    """The presigned URL of ``key`` for browsers: signed for the endpoint as they reach
    it (``s3.public_endpoint_url``, else the endpoint itself), valid for a week
    (docs/operations.md, "Links from the task to its report")."""
    endpoint = settings.s3.public_endpoint_url or settings.s3_endpoint_url
    return presigned_get_url(endpoint, settings.s3, key)


def arrow_filesystem(
    endpoint_url: str, settings: S3Settings, *, timeout_s: float = 10.0, attempts: int = 5
) -> pafs.S3FileSystem:
    """pyarrow's own S3 filesystem on the same endpoint, for ``pyarrow.dataset`` reads
    (many objects fetched in parallel by Arrow's threads), with bounded timeouts and
    retries like :func:`s3_client`'s."""
    scheme, _, address = endpoint_url.rstrip("/").partition("://")
    return pafs.S3FileSystem(
        access_key=settings.access_key,
        secret_key=settings.secret_key.get_secret_value(),
        region=settings.region,
        endpoint_override=address,
        scheme=scheme,
        connect_timeout=timeout_s,
        request_timeout=timeout_s,
        retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=attempts),
    )


class ObjectStoreError(PhotonError, RuntimeError):
    """The object store did not answer, or refused, within the retry limits."""


def _transient(exc: BaseException) -> bool:
    if isinstance(exc, ClientError):
        status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
        code = exc.response.get("Error", {}).get("Code", "")
        return status >= 500 or status == 429 or code in ("SlowDown", "RequestTimeout")
    return isinstance(exc, BotoCoreError)


#: What the objects Photon writes are, by suffix: pages and their styles open in a
#: browser from a presigned link (S3 would otherwise say ``binary/octet-stream``).
_CONTENT_TYPES = {
    ".html": "text/html; charset=utf-8",
    ".css": "text/css; charset=utf-8",
    ".js": "text/javascript; charset=utf-8",
    ".json": "application/json",
    ".png": "image/png",
    ".svg": "image/svg+xml",
    ".txt": "text/plain; charset=utf-8",
    ".log": "text/plain; charset=utf-8",
}


def content_type_of(key: str) -> str:
    """The content type an object of this key is served with."""
    suffix = key[key.rfind(".") :].lower() if "." in key.rsplit("/", 1)[-1] else ""
    return _CONTENT_TYPES.get(suffix, "application/octet-stream")


def _precondition_failed(exc: ClientError) -> bool:
    status = exc.response.get("ResponseMetadata", {}).get("HTTPStatusCode", 0)
    code = exc.response.get("Error", {}).get("Code", "")
    return status == 412 or code in ("PreconditionFailed", "ConditionalRequestConflict")


def _not_found(exc: ClientError) -> bool:
    code = exc.response.get("Error", {}).get("Code", "")
    return code in ("404", "NoSuchKey", "NotFound")


class ObjectStore:
    def __init__(
        self,
        client: S3Client,
        bucket: str,
        *,
        attempts: int = 5,
        max_backoff_s: float = 5.0,
        arrow_fs: pafs.FileSystem | Callable[[], pafs.FileSystem] | None = None,
    ) -> None:
        if attempts < 1:
            raise ValueError(f"attempts must be at least 1, not {attempts}")
        self.bucket = bucket
        self._s3 = client
        # pyarrow's filesystem on the same endpoint, for read_parquet, or what makes it:
        # made on first use, so the joiners (which never read so) do not start AWS's SDK.
        self._arrow_fs = arrow_fs
        #: Chaos only (faults.*): off unless the settings switch it on.
        self.faults = NO_FAULTS
        self._attempts = attempts
        self._max_backoff_s = max_backoff_s

    @classmethod
    def from_settings(cls, settings: PhotonSettings, *, timeout_s: float = 10.0) -> ObjectStore:
        # boto3 retries once inside; our own backoff (tenacity) does the rest.
        client = s3_client(settings.s3_endpoint_url, settings.s3, timeout_s=timeout_s, attempts=1)
        store = cls(
            client,
            settings.s3.bucket,
            arrow_fs=lambda: arrow_filesystem(
                settings.s3_endpoint_url, settings.s3, timeout_s=timeout_s
            ),
        )
        faults = FaultInjector(settings.faults)
        if faults.active:
            store.faults = faults
        return store

    def put(
        self, key: str, data: bytes, *, if_absent: bool = False, content_type: str | None = None
    ) -> bool:
        """Write ``data`` under ``key``; with ``if_absent``, only if no object is there.

        ``if_absent`` is S3's conditional put (``If-None-Match: *``), decided by the
        server atomically: of two writers racing for a key, one wins. Returns whether
        the object is this call's (False: one was there). A retried put whose first
        try did land finds its own object there and answers False too.
        ``content_type`` (None: by the key's suffix, :func:`content_type_of`) is what a
        browser is told the object is: a page opens, rather than downloads.
        """
        condition: dict[str, str] = {"IfNoneMatch": "*"} if if_absent else {}
        condition["ContentType"] = content_type or content_type_of(key)
        try:
            self.faults.write(
                key,
                lambda: self._call(
                    self._s3.put_object, Bucket=self.bucket, Key=key, Body=data, **condition
                ),
            )
        except ClientError as exc:
            if if_absent and _precondition_failed(exc):
                return False
            raise
        return True

    def get(self, key: str) -> bytes | None:
        """The object's bytes, or None when there is none."""
        try:
            response = self._call(self._s3.get_object, Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _not_found(exc):
                return None
            raise
        body: bytes = response["Body"].read()
        return body

    def exists(self, key: str) -> bool:
        try:
            self._call(self._s3.head_object, Bucket=self.bucket, Key=key)
        except ClientError as exc:
            if _not_found(exc):
                return False
            raise
        return True

    def keys(self, prefix: str) -> Iterator[str]:
        """Every key under ``prefix``, in key order."""
        for page in self._listing(prefix):
            for item in page.get("Contents", []):
                yield item["Key"]

    def folders(self, prefix: str) -> list[str]:
        """The "folders" right under ``prefix`` (common prefixes up to the next ``/``)."""
        return [
            p["Prefix"]
            for page in self._listing(prefix, Delimiter="/")
            for p in page.get("CommonPrefixes", [])
        ]

    def _listing(self, prefix: str, **extra: str) -> Iterator[dict[str, Any]]:
        """The pages of a ``list_objects_v2`` of ``prefix``, following continuation tokens."""
        token: str | None = None
        while True:
            args: dict[str, Any] = {"Bucket": self.bucket, "Prefix": prefix, **extra}
            if token:
                args["ContinuationToken"] = token
            page: dict[str, Any] = self._call(self._s3.list_objects_v2, **args)
            yield page
            if not page.get("IsTruncated"):
                return
            token = page.get("NextContinuationToken")

    def arrow_fs(self) -> pafs.FileSystem:
        """pyarrow's filesystem on this store's endpoint (made once, on first use)."""
        if self._arrow_fs is None:
            raise ObjectStoreError(
                "this object store has no Arrow filesystem to read Parquet with "
                "(build it with ObjectStore.from_settings, or pass arrow_fs)"
            )
        if not isinstance(self._arrow_fs, pafs.FileSystem):
            self._arrow_fs = self._arrow_fs()
        return self._arrow_fs

    def read_parquet(
        self,
        keys: Sequence[str],
        *,
        columns: Sequence[str] | None = None,
        key_column: str = "object_key",
    ) -> pa.Table:
        """The rows of the Parquet objects ``keys`` (their ``columns``, or all the first
        object has), read with ``pyarrow.dataset``: Arrow's threads fetch and decode the
        objects in parallel. Each row has the key of the object that holds it in
        ``key_column``; a column an object lacks is null. An empty table (no columns)
        when ``keys`` is empty.
        """
        if not keys:
            return pa.table({})
        # Here, not at the top: pyarrow.dataset loads pandas (~0.2 CPU-s), which the
        # apps' drivers and workers that import this module never use.
        import pyarrow.dataset as pads

        dataset = pads.dataset(
            [f"{self.bucket}/{key}" for key in keys], filesystem=self.arrow_fs(), format="parquet"
        )
        try:
            wanted = list(columns) if columns is not None else dataset.schema.names
            table = dataset.to_table(columns=[*wanted, "__filename"])
        except OSError as exc:  # Arrow retried within its own limits (arrow_filesystem)
            raise ObjectStoreError(
                f"reading {len(keys)} object(s) of s3://{self.bucket}: {exc}"
            ) from exc
        names = table.column("__filename").to_pylist()
        object_keys = pa.array([n.removeprefix(f"{self.bucket}/") for n in names], pa.string())
        return table.drop_columns(["__filename"]).append_column(key_column, object_keys)

    def delete(self, keys: list[str]) -> None:
        """Delete ``keys``; raise :class:`ObjectStoreError` naming every key the endpoint kept.

        A multi-object delete answers 200 even when it refuses keys (AccessDenied,
        say): the refusals are in the answer's ``Errors``, not an exception.
        """
        for start in range(0, len(keys), 1000):
            chunk = [{"Key": k} for k in keys[start : start + 1000]]
            answer = self._call(
                self._s3.delete_objects, Bucket=self.bucket, Delete={"Objects": chunk}
            )
            refused = [f"{e.get('Key')}: {e.get('Code')}" for e in answer.get("Errors", [])]
            if refused:
                raise ObjectStoreError(
                    f"s3://{self.bucket} kept {len(refused)} of {len(chunk)} key(s) asked "
                    f"to be deleted: {'; '.join(refused[:5])}"
                )

    def _call(self, func: Any, **kwargs: Any) -> Any:
        retrying = Retrying(
            stop=stop_after_attempt(self._attempts),
            wait=wait_exponential(multiplier=0.1, max=self._max_backoff_s),
            retry=retry_if_exception(_transient),
            reraise=False,
        )

        def attempt() -> Any:
            self.faults.before_s3_call(func.__name__)
            return func(**kwargs)

        try:
            return retrying(attempt)
        except RetryError as exc:
            cause = exc.last_attempt.exception()
            raise ObjectStoreError(
                f"{func.__name__} on s3://{self.bucket} failed {self._attempts} times: {cause}"
            ) from cause
