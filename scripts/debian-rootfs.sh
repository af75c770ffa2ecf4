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
# (PODMPI_MIRROR overrides it). The root is built in DEST.tmp.<pid> and moved
# into place only when complete; the log is DEST.log. Exit status 0 when the
# root is ready (cached or built), 1 with one line saying why otherwise.
set -euo pipefail
export PATH="$PATH:/usr/sbin:/sbin"
suite= dest= sysroot=0
checks=()
while [ $# -gt 0 ]; do
  case "$1" in
  --suite) suite=$2; shift 2 ;;
  --dest) dest=$2; shift 2 ;;
  --check) checks+=("$2"); shift 2 ;;
  --sysroot) sysroot=1; shift ;;
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

ready() {
  local c
  for c in "${checks[@]}"; do
    [ -e "$1/$c" ] || return 1
  done
}
if ready "$dest"; then
  echo "$name: cached in $dest"
  exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
  echo "$name: not in $dest, and building it needs root (debootstrap)"; exit 1
fi
command -v debootstrap >/dev/null || { echo "$name: apt-get install -y debootstrap"; exit 1; }
# The Debian mirror this machine already uses.
mirror=${PODMPI_MIRROR:-$(grep -rhoE '^(URIs:|deb) +https?://[^ ]+/debian/?( |$)' /etc/apt/sources.list /etc/apt/sources.list.d/ 2>/dev/null \
  | grep -oE 'https?://[^ ]+' | grep -v security | head -1 || true)}
mirror=${mirror:-http://deb.debian.org/debian}
tmp="$dest.tmp.$$"
log="$dest.log"
cleanup() { umount "$tmp/proc" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT
mkdir -p "$(dirname "$dest")"
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
ready "$tmp" || { echo "$name: built, but ${checks[*]} not all present; see $log"; exit 1; }
rm -rf "$dest"
mv "$tmp" "$dest"
trap - EXIT
echo "$name: ready in $dest after $(($(date +%s) - start)) s"
