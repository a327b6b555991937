"""The S3 endpoint on loopback: a real ``minio`` server when one is on PATH,
otherwise ``moto_server`` (docs/ARCHITECTURE.md; no MinIO binary can be had from the
registries here). Both are reached through the same boto3/minio code.

moto keeps objects in memory: restarting it loses them, which is fine for a
stand-in and is said in the docs. It runs with its writes serialized
(:mod:`photon.tooling.stack.s3_standin`), so a conditional put is atomic as on
S3 and MinIO. MinIO keeps them under the stack directory.
Healthy when ListBuckets answers; ``ensure_bucket`` then creates the bucket.
"""

from __future__ import annotations

import shutil
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from botocore.exceptions import BotoCoreError, ClientError

from photon.extras import require
from photon.settings import S3Settings, StackSettings
from photon.storage import s3_client

if TYPE_CHECKING:
    from mypy_boto3_s3 import S3Client

S3Backend = Literal["minio", "moto"]


def pick_backend() -> S3Backend:
    if shutil.which("minio"):
        return "minio"
    require("moto", "stack", "the local stack's S3 endpoint (no `minio` binary on PATH)")
    return "moto"


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
        # moto's server, its writes one at a time: write-once is atomic (s3_standin)
        return [sys.executable, "-m", "photon.tooling.stack.s3_standin", "-H", self.stack.host,
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
