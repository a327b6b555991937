#!/usr/bin/env bash
# Makes the image every Photon image is built FROM, debian:bookworm-slim, out of
# Debian's own packages, for machines that cannot pull it from a registry
# (docs/deploy.md, "Where no registry answers"). Where `docker pull` works, this
# is not needed: the build pulls it.
#
#   infra/docker/build-base-image.sh            # only if the image is missing
#   infra/docker/build-base-image.sh --force    # make it again
#
# debootstrap's minbase variant from the Debian mirror apt is configured with
# (deb.debian.org unless the machine's sources say otherwise), then `docker import`.
# Needs root (debootstrap) and a running Docker engine.
set -euo pipefail

IMAGE=debian:bookworm-slim
force=${1:-}
if [ "$force" != "--force" ] && docker image inspect "$IMAGE" >/dev/null 2>&1; then
  echo "base image: $IMAGE is present"
  exit 0
fi
command -v debootstrap >/dev/null || {
  echo "base image: debootstrap is missing (apt-get install debootstrap)" >&2
  exit 1
}

# The machine's own Debian mirror: a deb822 `URIs:` line, or a one-line `deb` entry.
mirror=$(
  { grep -hsE '^URIs:' /etc/apt/sources.list.d/*.sources | awk '{print $2}'
    grep -hsE '^deb ' /etc/apt/sources.list | awk '{print $2}'
  } | grep -v -e security -e '^$' | grep -m1 'debian' || true
)
mirror=${mirror:-http://deb.debian.org/debian}

root=$(mktemp -d /tmp/photon-base.XXXXXX)
trap 'rm -rf "$root"' EXIT
echo "base image: debootstrap bookworm from $mirror"
debootstrap --variant=minbase bookworm "$root" "$mirror" >/dev/null
# apt inside the image uses the same mirror, and keeps no package lists.
echo "deb $mirror bookworm main" > "$root/etc/apt/sources.list"
rm -rf "$root"/var/lib/apt/lists/* "$root"/var/cache/apt/archives/*.deb
tar -C "$root" -c . | docker import --change 'CMD ["bash"]' - "$IMAGE" >/dev/null
echo "base image: $IMAGE imported ($(docker image inspect -f '{{.Size}}' "$IMAGE") bytes)"
