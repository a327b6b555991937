"""Per-service S3 users against an endpoint that enforces IAM policies.

A private moto server of this module's own: users and policies are made with
:func:`provision_iam` while it accepts anyone, then it is switched to checking
every request's signature and policy (moto's ``/moto-api/reset-auth``), and
each service's credentials are tried on the real key layout through
:class:`ObjectStore`, the code path the apps use.
"""

from __future__ import annotations

import sys
import urllib.request
from collections.abc import Callable, Iterator
from pathlib import Path

import boto3
import pytest
from botocore.exceptions import ClientError
from pydantic import SecretStr
from tenacity import Retrying, stop_after_delay, wait_fixed

from photon.join.logmap import delta_prefix
from photon.join.output import joined_key, quarantine_key, superseded_key, unjoinable_key
from photon.security.s3_access import Credentials, provision_iam
from photon.settings import S3Settings
from photon.storage import ObjectStore, ObjectStoreError, s3_client
from photon.tooling.stack import process
from photon.tooling.stack.ports import free_ports, port_is_listening

pytestmark = pytest.mark.integration

HOUR = "2026-11-26T01"  # an event hour of the output's layout

BUCKET = "photon"
DCS = ["a", "b"]
SEEDED = {
    "joined/dc=b/other/000000000001.parquet": b"b's output",
    "logmap/dc=a/delta/r1.parquet": b"a's map",
    "logmap/dc=b/delta/r1.parquet": b"b's map",
    "reports/verify/r1/report.json": b"{}",
}


@pytest.fixture(scope="module")
def endpoint(tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    port = free_ports(1)[0]
    url = f"http://127.0.0.1:{port}"
    output = tmp_path_factory.mktemp("moto-iam") / "output.log"
    identity = process.start_detached(
        [sys.executable, "-m", "moto.server", "-H", "127.0.0.1", "-p", str(port)], output=output
    )
    try:
        for attempt in Retrying(stop=stop_after_delay(30), wait=wait_fixed(0.2), reraise=True):
            with attempt:
                assert port_is_listening("127.0.0.1", port)
        yield url
    finally:
        process.stop(identity)


@pytest.fixture(scope="module")
def users(endpoint: str) -> dict[str, Credentials]:
    """Bucket, seeded objects and users made openly; then every request must pass IAM."""
    admin = store_as(endpoint, Credentials("admin", "admin-secret"))
    admin_settings = S3Settings(access_key="admin", secret_key=SecretStr("admin-secret"))
    s3_client(endpoint, admin_settings).create_bucket(Bucket=BUCKET)
    for key, data in SEEDED.items():
        admin.put(key, data)
    iam = boto3.client(
        "iam",
        endpoint_url=endpoint,
        aws_access_key_id="admin",
        aws_secret_access_key="admin-secret",
        region_name="us-east-1",
    )
    made = provision_iam(iam, BUCKET, DCS)
    request = urllib.request.Request(  # text/plain: a form body would reach moto empty
        f"{endpoint}/moto-api/reset-auth",
        data=b"0",
        method="POST",
        headers={"Content-Type": "text/plain"},
    )
    urllib.request.urlopen(request, timeout=5).close()
    return made


def store_as(endpoint: str, credentials: Credentials) -> ObjectStore:
    client = s3_client(endpoint, settings_of(credentials), attempts=1)
    return ObjectStore(client, BUCKET, attempts=1)


def settings_of(credentials: Credentials) -> S3Settings:
    return S3Settings(
        access_key=credentials.access_key, secret_key=SecretStr(credentials.secret_key)
    )


def denied(action: Callable[[], object]) -> bool:
    """True when calling ``action`` is refused with AccessDenied."""
    try:
        action()
    except ClientError as exc:
        return exc.response.get("Error", {}).get("Code") == "AccessDenied"
    except ObjectStoreError as exc:  # a multi-object delete names its refusals
        return "AccessDenied" in str(exc)
    return False


def test_without_credentials_of_a_user_nothing_is_allowed(
    endpoint: str, users: dict[str, Credentials]
) -> None:
    stranger = store_as(endpoint, Credentials("AKIANOTAUSER00000000", "not-a-secret"))
    with pytest.raises(ClientError):
        stranger.get("logmap/dc=a/delta/r1.parquet")


def test_a_joiner_writes_and_reads_back_only_its_dcs_output(
    endpoint: str, users: dict[str, Credentials]
) -> None:
    joiner = store_as(endpoint, users["joiner-a"])
    own = joined_key("a", "a-attempt", "000000000007", HOUR)
    assert joiner.put(own, b"rows", if_absent=True)  # asks first (HEAD), then writes
    assert not joiner.put(own, b"rows", if_absent=True)  # a replay writes nothing
    assert joiner.put(unjoinable_key("a", "a-attempt", "000000000007", HOUR), b"u")
    assert joiner.put(unjoinable_key("a", "a-attempt", "000000000007", HOUR, too_old=True), b"t")
    assert joiner.put(quarantine_key("a", "clicks", "a-attempt", "000000000007"), b"q")
    assert joiner.get("logmap/dc=a/delta/r1.parquet") == b"a's map"
    assert set(joiner.keys(delta_prefix("a"))) == {"logmap/dc=a/delta/r1.parquet"}

    assert denied(lambda: joiner.put(joined_key("b", "a-attempt", "000000000007", HOUR), b"x"))
    assert denied(lambda: joiner.get("joined/dc=b/other/000000000001.parquet"))
    assert denied(lambda: joiner.get("logmap/dc=b/delta/r1.parquet"))
    assert denied(lambda: joiner.get("reports/verify/r1/report.json"))
    assert denied(lambda: joiner.put("logmap/dc=a/delta/forged.parquet", b"x"))
    assert denied(lambda: joiner.put(superseded_key("a", HOUR, "forged"), b"x"))
    assert denied(lambda: joiner.delete([own]))
    assert denied(lambda: joiner.delete(["logmap/dc=a/delta/r1.parquet"]))
    assert joiner.get(own) == b"rows"  # still there


def test_a_query_reader_writes_only_its_dcs_map(
    endpoint: str, users: dict[str, Credentials]
) -> None:
    reader = store_as(endpoint, users["query-reader-b"])
    assert reader.put(f"{delta_prefix('b')}r2.parquet", b"map")
    assert reader.put(quarantine_key("b", "queries", "b-attempt", "000000000001"), b"q")
    assert reader.get("logmap/dc=b/delta/r1.parquet") == b"b's map"
    assert denied(lambda: reader.put(f"{delta_prefix('a')}r2.parquet", b"map"))
    assert denied(lambda: reader.put(joined_key("b", "b-attempt", "000000000001", HOUR), b"x"))
    assert denied(lambda: reader.get("joined/dc=b/other/000000000001.parquet"))


def test_the_verifier_reads_everything_and_writes_only_its_reports(
    endpoint: str, users: dict[str, Credentials]
) -> None:
    verifier = store_as(endpoint, users["verifier"])
    for key, data in SEEDED.items():
        assert verifier.get(key) == data
    assert verifier.put("reports/verify/r2/report.json", b"{}")
    assert denied(lambda: verifier.put(joined_key("a", "v", "000000000001", HOUR), b"x"))
    assert denied(lambda: verifier.put("logmap/dc=a/sorted/r.parquet", b"x"))
    assert denied(lambda: verifier.put(superseded_key("a", HOUR, "r"), b"x"))
    assert denied(lambda: verifier.delete(["joined/dc=b/other/000000000001.parquet"]))


def test_operations_maintain_the_map_but_cannot_touch_the_output(
    endpoint: str, users: dict[str, Credentials]
) -> None:
    operations = store_as(endpoint, users["operations"])
    assert operations.put("logmap/dc=b/sorted/r1.parquet", b"merged")
    # One DeleteObject: moto judges a multi-object delete against the bucket, not each
    # key as S3 and MinIO do, so it would refuse even a permitted key.
    raw = s3_client(endpoint, settings_of(users["operations"]))
    raw.delete_object(Bucket=BUCKET, Key="logmap/dc=b/delta/r1.parquet")
    assert operations.get("logmap/dc=b/delta/r1.parquet") is None
    assert operations.put("reports/compaction/r1.json", b"{}")
    assert operations.put(superseded_key("b", HOUR, "recovery-r1-1"), b"marks")
    assert operations.get("joined/dc=b/other/000000000001.parquet") == b"b's output"
    assert denied(lambda: operations.put(joined_key("b", "o", "000000000001", HOUR), b"x"))
    assert denied(lambda: operations.delete(["joined/dc=b/other/000000000001.parquet"]))


def test_the_committed_minio_policies_are_the_ones_provisioned(tmp_path: Path) -> None:
    from photon.security.s3_access import write_policy_files

    repo = Path(__file__).resolve().parents[4]
    written = write_policy_files(tmp_path, BUCKET, DCS)
    committed = repo / "infra" / "minio" / "policies"
    assert sorted(p.name for p in committed.glob("*.json")) == sorted(p.name for p in written)
    for path in written:
        assert (committed / path.name).read_text() == path.read_text(), path.name
