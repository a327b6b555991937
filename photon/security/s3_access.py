"""Least-privilege S3 access: one user and one policy per service.

Each service gets exactly what its code does to the bucket (keys from
:mod:`photon.join.output` and :mod:`photon.join.logmap`):

* ``joiner-<dc>`` writes its DC's output — ``joined/``, ``unjoinable/``,
  ``too_old/`` and ``quarantine/`` under ``dc=<dc>/`` — and reads it back
  (a write first asks whether the object exists: a replayed batch writes
  nothing twice); reads its DC's log-file map. It cannot delete anything, nor
  read another DC's output or the reports.
* ``query-reader-<dc>`` writes its DC's log-file-map deltas and quarantined
  query lines; reads its DC's map.
* ``verifier`` reads everything and writes only its reports (``reports/verify/``).
* ``operations`` (Airflow's compaction and recovery) reads everything, writes
  and deletes the log-file map, writes ``reports/`` and recovery's marks on
  superseded unjoinable records (``superseded/``).

Every service may list the bucket: ``ListBucket`` is a bucket-wide action whose
prefix condition (``s3:prefix``) not every S3 endpoint evaluates (moto does
not), so listing shows key names — never contents — across prefixes.

The same documents serve MinIO in compose (``infra/minio/policies/*.json``,
written by ``photon stack s3-policies``) and any endpoint speaking AWS IAM
(:func:`provision_iam`; moto here). How it fails: provisioning a user that
exists raises the endpoint's ``EntityAlreadyExists``; nothing is half-made
for that user beyond what the error names.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from photon.apps import JOINER, QUERY_READER
from photon.join.output import OUTPUT_KINDS, SUPERSEDED_KIND, output_prefix


@dataclass(frozen=True, slots=True)
class Credentials:
    access_key: str
    secret_key: str


def service_names(dcs: list[str]) -> list[str]:
    per_dc = [f"{app}-{dc}" for dc in dcs for app in (JOINER, QUERY_READER)]
    return [*per_dc, "verifier", "operations"]


def _objects(bucket: str, prefixes: list[str]) -> list[str]:
    return [f"arn:aws:s3:::{bucket}/{prefix}*" for prefix in prefixes]


def _statement(sid: str, actions: list[str], resources: list[str]) -> dict[str, Any]:
    return {"Sid": sid, "Effect": "Allow", "Action": actions, "Resource": resources}


def policy(service: str, bucket: str, dcs: list[str]) -> dict[str, Any]:
    """The policy document of ``service`` (one of :func:`service_names`)."""
    if service not in service_names(dcs):
        raise ValueError(f"unknown service {service!r}; known: {', '.join(service_names(dcs))}")
    statements = [_statement("List", ["s3:ListBucket"], [f"arn:aws:s3:::{bucket}"])]
    app, _, dc = service.rpartition("-")
    if app == JOINER:
        own = [output_prefix(kind, dc) for kind in OUTPUT_KINDS]
        statements += [
            _statement("WriteOwnOutput", ["s3:PutObject", "s3:GetObject"], _objects(bucket, own)),
            _statement("ReadOwnMap", ["s3:GetObject"], _objects(bucket, [f"logmap/dc={dc}/"])),
        ]
    elif app == QUERY_READER:
        own = [f"logmap/dc={dc}/delta/", f"{output_prefix('quarantine', dc)}stream=queries/"]
        statements += [
            _statement("WriteOwnMap", ["s3:PutObject", "s3:GetObject"], _objects(bucket, own)),
            _statement("ReadOwnMap", ["s3:GetObject"], _objects(bucket, [f"logmap/dc={dc}/"])),
        ]
    elif service == "verifier":
        statements += [
            _statement("ReadAll", ["s3:GetObject"], _objects(bucket, [""])),
            _statement("WriteReports", ["s3:PutObject"], _objects(bucket, ["reports/verify/"])),
        ]
    else:  # operations
        statements += [
            _statement("ReadAll", ["s3:GetObject"], _objects(bucket, [""])),
            _statement(
                "MaintainMap", ["s3:PutObject", "s3:DeleteObject"], _objects(bucket, ["logmap/"])
            ),
            _statement("WriteReports", ["s3:PutObject"], _objects(bucket, ["reports/"])),
            _statement(
                "MarkSuperseded",
                ["s3:PutObject"],
                _objects(bucket, [output_prefix(SUPERSEDED_KIND)]),
            ),
        ]
    return {"Version": "2012-10-17", "Statement": statements}


def policies(bucket: str, dcs: list[str]) -> dict[str, dict[str, Any]]:
    return {service: policy(service, bucket, dcs) for service in service_names(dcs)}


def policy_json(document: dict[str, Any]) -> str:
    """The document as committed and as sent: stable key order, one trailing newline."""
    return json.dumps(document, indent=2) + "\n"


def write_policy_files(directory: Path, bucket: str, dcs: list[str]) -> list[Path]:
    """``<directory>/<service>.json`` for every service (MinIO's ``mc admin policy create``)."""
    directory.mkdir(parents=True, exist_ok=True)
    written = []
    for service, document in policies(bucket, dcs).items():
        path = directory / f"{service}.json"
        path.write_text(policy_json(document))
        written.append(path)
    return written


def provision_iam(iam: Any, bucket: str, dcs: list[str]) -> dict[str, Credentials]:
    """Create a user per service on an endpoint speaking AWS IAM, with its policy and key.

    ``iam`` is a boto3 IAM client of that endpoint.
    """
    made: dict[str, Credentials] = {}
    for service, document in policies(bucket, dcs).items():
        user = f"photon-{service}"
        iam.create_user(UserName=user)
        iam.put_user_policy(
            UserName=user, PolicyName=f"photon-{service}", PolicyDocument=json.dumps(document)
        )
        key = iam.create_access_key(UserName=user)["AccessKey"]
        made[service] = Credentials(key["AccessKeyId"], key["SecretAccessKey"])
    return made
