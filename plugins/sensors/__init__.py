"""Sensors of the operations DAGs."""
