"""The Prometheus alert rules: valid, each tested by promtool, each linking the RUNBOOK."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.integration

REPO = Path(__file__).resolve().parents[3]
RULES = REPO / "infra" / "prometheus" / "rules"


def _promtool() -> str:
    found = shutil.which("promtool")
    assert found, "promtool is missing: make installs Debian's prometheus package"
    return found


def test_the_rules_are_valid_and_their_tests_pass() -> None:
    for args in (["check", "rules", "photon.yml"], ["test", "rules", "photon_test.yml"]):
        result = subprocess.run(
            [_promtool(), *args], cwd=RULES, capture_output=True, text=True, timeout=120
        )
        assert result.returncode == 0, result.stdout + result.stderr


def test_every_rule_is_tested_and_links_a_runbook_section_that_exists() -> None:
    rules = [r for g in yaml.safe_load((RULES / "photon.yml").read_text())["groups"]
             for r in g["rules"]]  # fmt: skip
    tests = yaml.safe_load((RULES / "photon_test.yml").read_text())["tests"]
    tested = {case["alertname"] for t in tests for case in t["alert_rule_test"]}
    runbook = (REPO / "docs" / "RUNBOOK.md").read_text()
    anchors = {
        re.sub(r"[^a-z0-9 -]", "", line[3:].strip().lower()).replace(" ", "-")
        for line in runbook.splitlines()
        if line.startswith("## ")
    }
    assert len(rules) >= 5
    for rule in rules:
        assert rule["alert"] in tested, rule["alert"]
        page, _, anchor = rule["annotations"]["runbook_url"].partition("#")
        assert page == "docs/RUNBOOK.md" and anchor in anchors, (rule["alert"], anchor)
        assert "{{ $labels.dc" in rule["annotations"]["summary"], rule["alert"]


def test_prometheus_loads_the_rules_file() -> None:
    config = yaml.safe_load((REPO / "infra" / "prometheus" / "prometheus.yml").read_text())
    assert config["rule_files"] == ["rules/photon.yml"]
    compose = yaml.safe_load((REPO / "docker-compose.yml").read_text())
    mounts = compose["services"]["prometheus"]["volumes"]
    assert "./infra/prometheus/rules:/etc/prometheus/rules:ro" in mounts
