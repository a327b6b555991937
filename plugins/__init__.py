"""Photon's Airflow hooks, operators and sensors (DESIGN §5).

Hooks do the work (through :mod:`photon.ops`); operators and sensors stay
thin. Heavy imports (kazoo, boto3, pandas, Spark) happen inside methods, so
importing a DAG file that uses these stays cheap and opens no connection.
"""
