#!/bin/sh
# Airflow's database in the compose stack: Debian's PostgreSQL, as `photon up`
# runs it (docs/deploy.md). On first start it makes the cluster in $PGDATA (a
# volume) with one password-protected superuser $POSTGRES_USER and the database
# $POSTGRES_DB; then it serves on every address of the container (the compose
# network; the port is not published), password auth only.
set -eu
: "${PGDATA:=/data/postgres/pgdata}" "${POSTGRES_USER:=airflow}" "${POSTGRES_DB:=airflow}"
: "${POSTGRES_PASSWORD:?set the secrets in .env (photon stack compose-env)}"
bin=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)

if [ ! -s "$PGDATA/PG_VERSION" ]; then
  mkdir -p "$PGDATA" && chmod 700 "$PGDATA"
  pwfile=$(mktemp) && printf '%s\n' "$POSTGRES_PASSWORD" > "$pwfile"
  "$bin/initdb" -D "$PGDATA" -U "$POSTGRES_USER" --pwfile="$pwfile" -E UTF8 \
    --auth-host=scram-sha-256 --auth-local=scram-sha-256 >/dev/null
  rm -f "$pwfile"
  echo "host all all 0.0.0.0/0 scram-sha-256" >> "$PGDATA/pg_hba.conf"
  echo "CREATE DATABASE \"$POSTGRES_DB\";" | "$bin/postgres" --single -D "$PGDATA" postgres >/dev/null
  echo "postgres: cluster made, database $POSTGRES_DB"
fi
exec "$bin/postgres" -D "$PGDATA" -c listen_addresses='*' -c unix_socket_directories=/tmp
