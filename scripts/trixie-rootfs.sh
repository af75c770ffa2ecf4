#!/usr/bin/env bash
# Builds (once) the Debian trixie root the Open MPI 5 (PRRTE) end-to-end test
# chroots into: openmpi-bin 5.0 with its compiler. Cached in
# ${PODMPI_TRIXIE_ROOTFS:-/var/cache/podmpi/trixie-rootfs}; rebuilt only when
# missing. Root only; takes a few minutes.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
dest=${PODMPI_TRIXIE_ROOTFS:-/var/cache/podmpi/trixie-rootfs}
if [ -x "$dest/usr/bin/prted" ] && [ -x "$dest/usr/bin/mpicc.openmpi" ]; then
  echo "trixie rootfs: cached in $dest"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "trixie rootfs: needs root (debootstrap)"; exit 1
fi
command -v debootstrap >/dev/null || { echo "trixie rootfs: apt-get install -y debootstrap"; exit 1; }
# The Debian mirror this machine already uses.
mirror=$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
  | grep -oE 'https?://[^ ]+' | grep -v security | head -1 || true)
mirror=${mirror:-http://deb.debian.org/debian}
tmp="$dest.tmp.$$"
log="$dest.log"
cleanup() { umount "$tmp/proc" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
mkdir -p "$(dirname "$dest")"
echo "trixie rootfs: debootstrap from $mirror into $dest (a few minutes; log $log)"
# minbase first, then apt-get inside: debootstrap's --include does not order
# the configuration of openmpi's -dev dependencies (libltdl-dev fails).
debootstrap --variant=minbase trixie "$tmp" "$mirror" >"$log" 2>&1 \
  || { echo "trixie rootfs: debootstrap failed; tail of $log:"; tail -20 "$log"; exit 1; }
mount -t proc proc "$tmp/proc"
chroot "$tmp" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends \
  openmpi-bin libopenmpi-dev gcc libc6-dev >>"$log" 2>&1 \
  || { echo "trixie rootfs: apt-get install in the chroot failed; tail of $log:"; tail -20 "$log"; exit 1; }
chroot "$tmp" apt-get clean >>"$log" 2>&1 || true
umount "$tmp/proc"
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "trixie rootfs: ready in $dest ($(chroot "$dest" mpirun.openmpi --version | head -1))"
