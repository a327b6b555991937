"""The IdRegistry on a ZooKeeper ensemble, through kazoo (DESIGN §3).

Built in issue 3: batched conditional registers with tokens, time-based
sharding epochs, a monotone GC boundary. This package imports nothing of ours,
nor Spark or Airflow.
"""
