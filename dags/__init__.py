"""Thin Airflow 3 DAG files: wiring, params and schedules only, no top-level
I/O or heavy imports (docs/operations.md).
"""
