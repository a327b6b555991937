#!/usr/bin/env bash
# Install the Debian packages the local stack runs on, when they are missing:
# ZooKeeper (its jars and a Java runtime), Redis, PostgreSQL (Airflow's metadata
# database), Chromium (the Airflow UI test), Docker's engine with docker-compose
# and debootstrap (the compose stack: `make compose-demo` and its test; debootstrap
# makes the base image where no registry answers), Prometheus (the stack's, with
# the alert rules; its promtool tests them) and Redis's Prometheus exporter.
# Idempotent; prints what it does.
# Runs apt-get as root, or through sudo when that is available.
set -euo pipefail

need=()
[ -f /usr/share/java/zookeeper.jar ] || need+=(zookeeper)
command -v java >/dev/null 2>&1 || need+=(default-jre-headless)
command -v redis-server >/dev/null 2>&1 || need+=(redis-server)
compgen -G "/usr/lib/postgresql/*/bin/initdb" >/dev/null || need+=(postgresql)
command -v chromium >/dev/null 2>&1 || need+=(chromium)
command -v docker-compose >/dev/null 2>&1 || need+=(docker-compose)
command -v dockerd >/dev/null 2>&1 || need+=(docker.io)
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
command -v promtool >/dev/null 2>&1 || need+=(prometheus)  # promtool tests the alert rules
command -v prometheus-redis-exporter >/dev/null 2>&1 || need+=(prometheus-redis-exporter)

if [ ${#need[@]} -eq 0 ]; then
  echo "system packages: zookeeper, java, redis-server, postgresql, chromium, docker.io, docker-compose, debootstrap, prometheus and prometheus-redis-exporter are present"
  exit 0
fi

if [ "$(id -u)" -eq 0 ]; then
  sudo=()
elif command -v sudo >/dev/null 2>&1; then
  sudo=(sudo)
else
  echo "error: need root or sudo to install: ${need[*]}" >&2
  exit 1
fi

echo "system packages: installing ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
# Another apt (a second `make` in another checkout, unattended upgrades) may hold
# dpkg's lock: wait for it, up to 10 minutes, rather than fail at once.
wait_lock=(-o DPkg::Lock::Timeout=600)
"${sudo[@]}" apt-get "${wait_lock[@]}" update -qq
"${sudo[@]}" apt-get "${wait_lock[@]}" install -y -qq --no-install-recommends "${need[@]}" >/dev/null
# Debian starts no services without systemd; where it did start redis, leave it be:
# the stack runs its own redis-server on its own port.
echo "system packages: done"
