"""Airflow's database on the native stack: a PostgreSQL cluster of our own, from Debian's
binaries (``/usr/lib/postgresql/<v>/bin``).

:class:`LocalPostgres` makes the cluster once (``initdb``, password auth), gives the
argv that serves it on the stack's loopback address only, answers whether it
accepts connections, and creates a database. PostgreSQL refuses to run as root:
as root it runs as Debian's ``postgres`` user (``run_as``), and its data
directory must be reachable by that user.

How it fails: PostgreSQL not installed, ``initdb`` failing, or a data directory
the ``postgres`` user cannot reach raise :class:`PostgresError` saying what to do;
a half-made data directory is removed, so the next ``up`` starts over.
"""

from __future__ import annotations

import os
import pwd
import shutil
import subprocess
from pathlib import Path
from typing import Any

from photon.errors import PhotonError
from photon.settings import AirflowSettings

#: The database superuser, and the system user PostgreSQL runs as under root.
PG_USER = "postgres"


class PostgresError(PhotonError, RuntimeError):
    """The local PostgreSQL cannot be made or reached; the message says why."""


def postgres_bin() -> Path:
    """The newest Debian PostgreSQL's bin directory."""
    found = sorted(
        Path("/usr/lib/postgresql").glob("*/bin/postgres"),
        key=lambda p: int(p.parent.parent.name) if p.parent.parent.name.isdigit() else 0,
    )
    if not found:
        raise PostgresError(
            "PostgreSQL is not installed: run `make install` (Debian package postgresql)"
        )
    return found[-1].parent


class LocalPostgres:
    """A cluster in ``pgdata`` serving ``host:airflow.postgres_port``."""

    def __init__(self, pgdata: Path, host: str, airflow: AirflowSettings) -> None:
        self.pgdata = pgdata
        self.host = host
        self.port = airflow.postgres_port
        self.password = airflow.postgres_password
        self.run_as = PG_USER if os.geteuid() == 0 else None

    def url(self, dbname: str) -> str:
        password = self.password.get_secret_value()
        return f"postgresql+psycopg2://{PG_USER}:{password}@{self.host}:{self.port}/{dbname}"

    def init(self) -> None:
        """``initdb`` once (a cluster already made is kept)."""
        if (self.pgdata / "PG_VERSION").exists():
            return
        self.pgdata.parent.mkdir(parents=True, exist_ok=True)
        self.pgdata.mkdir(mode=0o700, exist_ok=True)
        password_file = self.pgdata.parent / "pg-password"
        password_file.write_text(self.password.get_secret_value() + "\n")
        password_file.chmod(0o600)
        if self.run_as is not None:
            user = pwd.getpwnam(self.run_as)
            for path in (self.pgdata, password_file):
                os.chown(path, user.pw_uid, user.pw_gid)
            self._check_reachable()
        argv = [
            str(postgres_bin() / "initdb"),
            "-D", str(self.pgdata),
            "-U", PG_USER,
            "--auth-host=scram-sha-256",
            "--auth-local=scram-sha-256",
            f"--pwfile={password_file}",
            "-E", "UTF8",
        ]  # fmt: skip
        try:
            result = subprocess.run(
                argv, capture_output=True, text=True, user=self.run_as, check=False
            )
        finally:
            password_file.unlink()
        if result.returncode != 0:
            shutil.rmtree(self.pgdata, ignore_errors=True)
            raise PostgresError(f"initdb failed:\n{result.stdout}\n{result.stderr}")

    def _check_reachable(self) -> None:
        """As root, the data directory must be reachable by the ``postgres`` user."""
        try:
            subprocess.run(["true"], cwd=self.pgdata, user=self.run_as, check=True)
        except (PermissionError, subprocess.CalledProcessError):
            shutil.rmtree(self.pgdata, ignore_errors=True)
            raise PostgresError(
                f"the postgres user cannot reach {self.pgdata}: PostgreSQL does not run as root, "
                "so set airflow.state_dir to a directory whose parents others may traverse"
            ) from None

    def argv(self) -> list[str]:
        return [
            str(postgres_bin() / "postgres"),
            "-D", str(self.pgdata),
            "-p", str(self.port),
            "-c", f"listen_addresses={self.host}",
            "-c", f"unix_socket_directories={self.pgdata}",
        ]  # fmt: skip

    def connect(self, dbname: str) -> Any:
        import psycopg2  # Airflow's role only

        return psycopg2.connect(
            host=self.host,
            port=self.port,
            user=PG_USER,
            password=self.password.get_secret_value(),
            dbname=dbname,
            connect_timeout=2,
        )

    def ready(self) -> bool:
        import psycopg2

        try:
            self.connect("postgres").close()
        except psycopg2.OperationalError:
            return False
        return True

    def ensure_database(self, name: str) -> None:
        if not name.isidentifier():
            raise PostgresError(f"not a database name: {name!r}")
        conn = self.connect("postgres")
        try:
            conn.autocommit = True
            with conn.cursor() as cursor:
                cursor.execute("SELECT 1 FROM pg_database WHERE datname = %s", (name,))
                if cursor.fetchone() is None:
                    cursor.execute(f'CREATE DATABASE "{name}"')
        finally:
            conn.close()
