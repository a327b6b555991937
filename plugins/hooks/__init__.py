"""Hooks: the registry (ZooKeeper), the object store (S3) and Photon's settings."""
