"""The S3 endpoint on loopback: a real ``minio`` server when one is on PATH,
otherwise ``moto_server`` (docs/ARCHITECTURE.md; no MinIO binary can be had from the
registries here). Both are reached through the same boto3/minio code.

moto keeps objects in memory: restarting it loses them, which is fine for a
stand-in and is said in the docs. MinIO keeps them under the stack directory.
Healthy when ListBuckets answers; ``ensure_bucket`` then creates the bucket.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

import boto3
import pyarrow.fs as pafs
from botocore.config import Config
from botocore.exceptions import BotoCoreError, ClientError

from photon.extras import require
from photon.settings import S3Settings, StackSettings

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

S3Backend = Literal["minio", "moto"]


def pick_backend() -> S3Backend:
    if shutil.which("minio"):
        return "minio"
    require("moto", "stack", "the local stack's S3 endpoint (no `minio` binary on PATH)")
    return "moto"


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


@dataclass(frozen=True, slots=True)
class S3Service:
    stack: StackSettings
    s3: S3Settings
    root: Path
    backend: S3Backend

    name = "s3"

    @property
    def directory(self) -> Path:
        return self.root / self.name

    def ports(self) -> dict[str, int]:
        return {"s3_port": self.stack.s3_port}

    def endpoint_url(self) -> str:
        return f"http://{self.stack.host}:{self.stack.s3_port}"

    def prepare(self) -> None:
        (self.directory / "data").mkdir(parents=True, exist_ok=True)

    def argv(self) -> list[str]:
        address = f"{self.stack.host}:{self.stack.s3_port}"
        if self.backend == "minio":
            # The console listens on an ephemeral port: only the API port is the stack's.
            return ["minio", "server", str(self.directory / "data"), "--address", address,
                    "--console-address", f"{self.stack.host}:0", "--quiet"]  # fmt: skip
        return [sys.executable, "-m", "moto.server", "-H", self.stack.host,
                "-p", str(self.stack.s3_port)]  # fmt: skip

    def env(self) -> dict[str, str]:
        """What the server needs in its environment (MinIO's root credentials)."""
        if self.backend == "minio":
            return {
                "MINIO_ROOT_USER": self.s3.access_key,
                "MINIO_ROOT_PASSWORD": self.s3.secret_key.get_secret_value(),
            }
        return {}

    def client(self, timeout_s: float = 2.0) -> S3Client:
        return s3_client(self.endpoint_url(), self.s3, timeout_s=timeout_s, attempts=1)

    def check(self, timeout_s: float = 2.0) -> tuple[bool, str]:
        try:
            buckets = self.client(timeout_s).list_buckets().get("Buckets", [])
        except (BotoCoreError, ClientError) as exc:
            return False, f"ListBuckets failed: {exc}"
        return True, f"{self.backend}; buckets: {', '.join(b['Name'] for b in buckets) or 'none'}"

    def ensure_bucket(self) -> bool:
        """Create the configured bucket if missing; True if it was created."""
        client = self.client()
        try:
            client.head_bucket(Bucket=self.s3.bucket)
            return False
        except ClientError as exc:
            if exc.response.get("Error", {}).get("Code") not in ("404", "NoSuchBucket"):
                raise
        client.create_bucket(Bucket=self.s3.bucket)
        return True
