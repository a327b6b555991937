"""The per-service S3 policy documents: what each service may do, by construction."""

from __future__ import annotations

from typing import Any

import pytest

from photon.security.s3_access import policies, policy, service_names

pytestmark = pytest.mark.unit


def _grants(document: dict[str, Any]) -> dict[str, set[str]]:
    grants: dict[str, set[str]] = {}
    for statement in document["Statement"]:
        assert statement["Effect"] == "Allow" and "Condition" not in statement
        for action in statement["Action"]:
            grants.setdefault(action, set()).update(statement["Resource"])
    return grants


def test_every_service_has_a_policy() -> None:
    names = service_names(["a", "b"])
    per_dc = ["joiner-a", "query-reader-a", "joiner-b", "query-reader-b"]
    assert names == [*per_dc, "verifier", "operations"]
    assert set(policies("photon", ["a", "b"])) == set(names)


def test_a_joiner_may_write_only_its_dcs_output_and_delete_nothing() -> None:
    grants = _grants(policy("joiner-b", "photon", ["a", "b"]))
    assert "s3:DeleteObject" not in grants
    assert all("dc=b/" in r for r in grants["s3:PutObject"])
    assert {r.split("/")[1] for r in grants["s3:PutObject"]} == {
        "joined",
        "unjoinable",
        "too_old",
        "quarantine",
    }
    assert all("dc=b/" in r for r in grants["s3:GetObject"])


def test_the_verifier_reads_all_and_writes_only_reports() -> None:
    grants = _grants(policy("verifier", "photon", ["a"]))
    assert grants["s3:GetObject"] == {"arn:aws:s3:::photon/*"}
    assert grants["s3:PutObject"] == {"arn:aws:s3:::photon/reports/verify/*"}
    assert "s3:DeleteObject" not in grants


def test_only_operations_may_delete_and_only_the_map() -> None:
    deleting = {
        name: _grants(document).get("s3:DeleteObject")
        for name, document in policies("photon", ["a", "b"]).items()
    }
    assert {n for n, d in deleting.items() if d} == {"operations"}
    assert deleting["operations"] == {"arn:aws:s3:::photon/logmap/*"}


def test_an_unknown_service_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown service 'joiner-c'"):
        policy("joiner-c", "photon", ["a", "b"])
