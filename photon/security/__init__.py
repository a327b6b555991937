"""Least privilege for the platform's parts: per-service S3 users and their policies.

The registry's digest ACL lives with the registry (``registry.client``), Airflow's
admin with the local Airflow (``photon.tooling.stack.airflow``).
"""
