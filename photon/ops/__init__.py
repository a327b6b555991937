"""Operations on a running Photon: what the Airflow DAGs (and on-call) run.

One module per operation, each pure Python over the registry, the object
store and the local state, unit- and integration-tested without Airflow:
``gc`` (GC boundaries), ``reshard`` (sharding epochs), ``compaction`` (the
log-file map), ``verify`` (completeness and the Great Expectations suite),
``recover`` (lost ids back to a dispatcher). ``params`` holds the validated
parameters of each DAG, shared by its trigger form and its tasks.
"""
