#!/usr/bin/env bash
# Builds (once) a Debian root with debootstrap and caches it: the shared
# helper of scripts/trixie-rootfs.sh (Open MPI 5 for the PRRTE test) and
# scripts/bullseye-rootfs.sh (the old glibc worker-agent is built against).
#
#   scripts/debian-rootfs.sh --suite SUITE --dest DIR [--check PATH]... [--sysroot] [--] [PACKAGE...]
#
#   --suite    Debian suite (bullseye, trixie, ...)
#   --dest     where the root is cached; rebuilt only when a --check path is
#              missing under it
#   --check    a path relative to the root that must exist afterwards (repeat)
#   --sysroot  also make the root usable as a compiler sysroot: absolute
#              symlinks under usr/lib and usr/lib64 (the dynamic loader's,
#              libm.so's, ...) are rewritten relative, so that a linker given
#              --sysroot resolves them inside the root, not on the host
#   PACKAGE    installed with apt-get inside the root after debootstrap
#
# Needs root and debootstrap; uses the Debian mirror this machine's apt uses
# (PODMPI_MIRROR overrides it). One build at a time per DEST, and DEST is
# either complete or absent: scripts/cache-build.sh takes DEST.lock (a second
# caller waits, up to PODMPI_ROOTFS_WAIT seconds, default 1800, and then
# reuses the root the first one built) and runs this script again with
# --build to debootstrap into a temporary folder it renames to DEST when
# every --check path is there. The log is DEST.log. Exit status 0 when the
# root is ready (cached, reused or built), 1 with one line saying why
# otherwise.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
args=("$@")
suite= dest= sysroot=0 build=0
checks=()
while [ $# -gt 0 ]; do
  case "$1" in
  --suite) suite=$2; shift 2 ;;
  --dest) dest=$2; shift 2 ;;
  --check) checks+=("$2"); shift 2 ;;
  --sysroot) sysroot=1; shift ;;
  --build) build=1; shift ;; # from scripts/cache-build.sh, holding DEST.lock: build into $PODMPI_CACHE_TMP
  --) shift; break ;;
  -*) echo "debian-rootfs: unknown option $1" >&2; exit 64 ;;
  *) break ;;
  esac
done
pkgs=("$@")
if [ -z "$suite" ] || [ -z "$dest" ] || [ "${#checks[@]}" -eq 0 ]; then
  echo "usage: $0 --suite SUITE --dest DIR --check PATH [--check PATH]... [--sysroot] [--] [PACKAGE...]" >&2
  exit 64
fi
name="$suite rootfs"

if [ "$build" -eq 0 ]; then
  cargs=()
  for c in "${checks[@]}"; do
    cargs+=(--check "$c")
  done
  exec "$(dirname "$0")/cache-build.sh" --name "$name" --dest "$dest" --wait "${PODMPI_ROOTFS_WAIT:-1800}" "${cargs[@]}" \
    -- "$0" --build "${args[@]}"
fi
tmp=${PODMPI_CACHE_TMP:?--build is for scripts/cache-build.sh, which names the folder to build in}
if [ "$(id -u)" -ne 0 ]; then
  echo "$name: not in $dest, and building it needs root (debootstrap)"; exit 1
fi
command -v debootstrap >/dev/null || { echo "$name: apt-get install -y debootstrap"; exit 1; }
# The Debian mirror this machine already uses.
mirror=${PODMPI_MIRROR:-$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
  | grep -oE 'https?://[^ ]+' | grep -v security | head -1 || true)}
mirror=${mirror:-http://deb.debian.org/debian}
log="$dest.log"
# A proc mount left in the temporary root would survive its removal.
cleanup() { umount "$tmp/proc" 2>/dev/null || true; }
trap cleanup EXIT
start=$(date +%s)
echo "$name: debootstrap from $mirror into $dest (a few minutes; log $log)"
# minbase first, then apt-get inside: debootstrap's --include does not order
# the configuration of some -dev dependencies (libltdl-dev fails).
debootstrap --variant=minbase "$suite" "$tmp" "$mirror" >"$log" 2>&1 \
  || { echo "$name: debootstrap failed; tail of $log:"; tail -20 "$log"; exit 1; }
if [ "${#pkgs[@]}" -gt 0 ]; then
  mount -t proc proc "$tmp/proc"
  chroot "$tmp" env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${pkgs[@]}" >>"$log" 2>&1 \
    || { echo "$name: apt-get install ${pkgs[*]} in the chroot failed; tail of $log:"; tail -20 "$log"; exit 1; }
  chroot "$tmp" apt-get clean >>"$log" 2>&1 || true
  umount "$tmp/proc"
fi
if [ "$sysroot" -eq 1 ]; then
  n=0
  while IFS= read -r l; do
    t=$(readlink "$l")
    case "$t" in
    /*)
      ln -sfn "$(realpath -m --relative-to="$(dirname "$l")" "$tmp$t")" "$l"
      n=$((n + 1))
      ;;
    esac
  done < <(find "$tmp/usr/lib" "$tmp/usr/lib64" -xdev -type l 2>/dev/null)
  echo "$name: $n absolute symlinks under usr/lib made relative (sysroot)" >>"$log"
fi
echo "$name: built in $(($(date +%s) - start)) s"
