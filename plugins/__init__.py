"""Photon's Airflow hooks, operators and sensors (docs/operations.md).

Hooks turn Airflow connections into Photon's clients (the registry, the
object store) and settings; the work itself is in :mod:`photon.ops`, which
the thin operators and sensors call. Heavy imports (kazoo, boto3, pandas,
Spark) happen inside methods, so importing a DAG file that uses these stays
cheap and opens no connection.
"""
