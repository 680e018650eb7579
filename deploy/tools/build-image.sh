#!/usr/bin/env bash
# Build the Dockerfile without a Docker engine: buildah (Debian package) with the vfs storage driver
# and chroot isolation, which work as root in a VM with no container runtime. The Dockerfile's base
# (python:3.11-slim-bookworm) comes from a registry this machine cannot reach, so an equivalent base
# is made here with debootstrap from the Debian mirror: bookworm's Python 3.11, pip and venv, this
# machine's CA bundle (its egress to PyPI presents its own CA), tagged as that base.
#
#   deploy/tools/build-image.sh [TAG]        (default localhost/volcano-monitor:dev)
#
# Needs root, buildah and debootstrap (apt-get install buildah debootstrap). The base is cached in
# .tools/image-base between runs; remove it to rebuild.
set -euo pipefail
cd "$(dirname "$0")/../.."
tag="${1:-localhost/volcano-monitor:dev}"
base="localhost/python:3.11-slim-bookworm"
buildah() { command buildah --storage-driver vfs "$@"; }  # vfs: no overlay filesystem needed
if [ "$(id -u)" -ne 0 ]; then echo "build-image: needs root (buildah with chroot isolation)" >&2; exit 2; fi
for tool in buildah debootstrap; do
  command -v "$tool" >/dev/null || { echo "build-image: needs $tool (apt-get install buildah debootstrap)" >&2; exit 2; }
done

if ! buildah images --quiet "$base" >/dev/null 2>&1; then
  rootfs="$PWD/.tools/image-base"
  if [ ! -x "$rootfs/usr/bin/python3" ]; then
    rm -rf "$rootfs"
    debootstrap --variant=minbase --include=python3,python3-pip,python3-venv,python-is-python3,passwd \
      bookworm "$rootfs" http://deb.debian.org/debian >"$PWD/.tools/debootstrap.log" 2>&1 \
      || { echo "build-image: debootstrap failed, see .tools/debootstrap.log" >&2; exit 1; }
    rm -f "$rootfs"/usr/lib/python3*/EXTERNALLY-MANAGED  # the official image's Python is not Debian-managed
    rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
  fi
  cp /etc/ssl/certs/ca-certificates.crt "$rootfs/etc/ssl/certs/ca-certificates.crt"
  ctr="$(buildah from scratch)"
  buildah copy "$ctr" "$rootfs" / >/dev/null
  buildah config --env PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    --env PIP_CERT=/etc/ssl/certs/ca-certificates.crt --env SSL_CERT_FILE=/etc/ssl/certs/ca-certificates.crt \
    --cmd /bin/bash "$ctr"
  buildah commit --quiet "$ctr" "$base" >/dev/null
  buildah rm "$ctr" >/dev/null
fi
buildah bud --quiet --isolation chroot --network host --build-arg "PYTHON_IMAGE=$base" -t "$tag" . >/dev/null
echo "$tag"
