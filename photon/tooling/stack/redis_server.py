"""A Redis server on loopback for the CacheEventStore.

Started as ``redis-server`` with its configuration on the command line: bound
to the stack's loopback address, no persistence (the cache is best-effort and
rebuilt from the logs), and a memory bound with ``allkeys-lru`` eviction, the
LRU-bounded cache of docs/ARCHITECTURE.md. Healthy when it answers PING.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import redis

from photon.settings import RedisSettings, StackSettings


@dataclass(frozen=True, slots=True)
class RedisService:
    stack: StackSettings
    cache: RedisSettings
    root: Path

    name = "redis"

    @property
    def directory(self) -> Path:
        return self.root / self.name

    def ports(self) -> dict[str, int]:
        return {"redis_port": self.stack.redis_port}

    def prepare(self) -> None:
        self.directory.mkdir(parents=True, exist_ok=True)

    def argv(self) -> list[str]:
        return [
            "redis-server",
            "--port", str(self.stack.redis_port),
            "--bind", self.stack.host,
            "--dir", str(self.directory),
            "--save", "",
            "--appendonly", "no",
            "--maxmemory", f"{self.cache.maxmemory_mb}mb",
            "--maxmemory-policy", "allkeys-lru",
            "--daemonize", "no",
        ]  # fmt: skip

    def env(self) -> dict[str, str]:
        return {}

    def url(self) -> str:
        return f"redis://{self.stack.host}:{self.stack.redis_port}/0"

    def check(self, timeout_s: float = 1.0) -> tuple[bool, str]:
        client = redis.Redis.from_url(
            self.url(), socket_timeout=timeout_s, socket_connect_timeout=timeout_s
        )
        try:
            client.ping()
            policy = client.config_get("maxmemory-policy").get("maxmemory-policy", "?")
        except redis.RedisError as exc:
            return False, f"no PING answer: {exc}"
        finally:
            client.close()
        return True, f"PONG; maxmemory-policy {policy}"
