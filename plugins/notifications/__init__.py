"""Notifiers of the operations DAGs."""
