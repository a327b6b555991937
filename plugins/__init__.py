"""Airflow hooks, operators and sensors for the registry, the object store and
Spark jobs: hooks do the work, operators stay thin (DESIGN §5, issue 5).
"""
