#!/usr/bin/env bash
# Builds one entry of a shared build cache (a folder under /var/cache/podmpi:
# a Debian root, a venv, a wheel) so that two builders never write it at
# once and nobody ever sees it half built:
#
#   scripts/cache-build.sh --dest DIR --check PATH [--check PATH]... [--name NAME] [--wait SECONDS] -- COMMAND [ARG...]
#
#   --dest    the cache entry
#   --check   a path relative to DIR that a complete entry has (repeat)
#   --name    what the messages call the entry (default: DIR's base name)
#   --wait    how long to wait for another builder of DIR (default 1800 s)
#   COMMAND   builds the entry into the folder named by $PODMPI_CACHE_TMP
#             (DIR.tmp.<pid>, created empty), exits 0 when it is complete
#
# 1. When every --check path exists under DIR, DIR is ready: exit 0 at once.
# 2. Otherwise take DIR.lock (flock). While another builder holds it, wait,
#    saying every minute who holds it (the lock file names its pid and
#    command), for at most --wait seconds.
# 3. Holding the lock, look again: the builder waited for has usually made
#    DIR meanwhile, and it is reused.
# 4. Remove DIR.tmp.* (what a killed builder left: only the lock's holder
#    builds), run COMMAND, check its result, and put it in place with one
#    rename. An incomplete DIR is moved aside first and removed after, so
#    that DIR is at every moment either absent or complete.
#
# Before this, `make build` and `make cluster-up` each debootstrapped the
# bullseye root side by side; the second to finish removed the first's root
# while the first compiled against it (`features.h: No such file or
# directory`).
#
# Exit status: 0 when DIR is ready (found, reused or built); 1 with one line
# saying why otherwise (COMMAND failed, a --check path missing after it, the
# wait's deadline passed, the lock not writable); 64 for bad usage.
set -euo pipefail
dest= name= wait=1800
checks=()
while [ $# -gt 0 ]; do
  case "$1" in
  --dest) dest=$2; shift 2 ;;
  --check) checks+=("$2"); shift 2 ;;
  --name) name=$2; shift 2 ;;
  --wait) wait=$2; shift 2 ;;
  --) shift; break ;;
  *) echo "cache-build: unknown option $1" >&2; exit 64 ;;
  esac
done
if [ -z "$dest" ] || [ "${#checks[@]}" -eq 0 ] || [ $# -eq 0 ] || ! [[ "$wait" =~ ^[0-9]+$ ]]; then
  echo "usage: $0 --dest DIR --check PATH [--check PATH]... [--name NAME] [--wait SECONDS] -- COMMAND [ARG...]" >&2
  exit 64
fi
dest=${dest%/}
name=${name:-$(basename "$dest")}

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

lock="$dest.lock"
if ! mkdir -p "$(dirname "$dest")" 2>/dev/null || ! { exec 9<>"$lock"; } 2>/dev/null; then
  echo "$name: not in $dest, and its lock $lock cannot be written (building it needs write access to $(dirname "$dest"); as root?)"
  exit 1
fi
if ! flock -n 9; then
  start=$(date +%s)
  while :; do
    waited=$(($(date +%s) - start))
    if [ "$waited" -ge "$wait" ]; then
      echo "$name: another builder still holds $lock after ${waited} s (${wait} s allowed): $(cat "$lock" 2>/dev/null || echo 'holder unknown'); let it finish, or end that process"
      exit 1
    fi
    echo "$name: waiting for another builder of $dest (${waited} s of ${wait} s): $(cat "$lock" 2>/dev/null || echo 'holder unknown')"
    step=$((wait - waited))
    flock -w "$((step < 60 ? step : 60))" 9 && break
  done
  if ready "$dest"; then
    echo "$name: built by that builder meanwhile; reusing $dest"
    exit 0
  fi
  echo "$name: the other builder left no complete $dest; building it"
fi
# Holding the lock: say who, for anyone waiting.
printf 'pid %s since %s: %s\n' "$$" "$(date -u +%Y-%m-%dT%H:%M:%SZ)" "$*" >"$lock"

tmp="$dest.tmp.$$"
old="$dest.old.$$"
cleanup() { rm -rf --one-file-system "$tmp" "$old"; }
trap cleanup EXIT
rm -rf --one-file-system "$dest".tmp.* "$dest".old.*
mkdir "$tmp"
if ! PODMPI_CACHE_TMP=$tmp "$@"; then
  echo "$name: building $dest failed ($*); nothing was put in place"
  exit 1
fi
if ! ready "$tmp"; then
  echo "$name: built, but not every one of ${checks[*]} is there; nothing was put in place"
  exit 1
fi
if [ -e "$dest" ]; then
  mv "$dest" "$old"
fi
mv "$tmp" "$dest"
echo "$name: ready in $dest"
