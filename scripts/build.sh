#!/usr/bin/env bash
# make build: podmpi's binaries in OUTDIR (default bin) and OUTDIR/../libexec,
# laid out exactly as /opt/podmpi/bin and /opt/podmpi/libexec of the
# binaries-only image (images/podmpi.Dockerfile):
#
#   launcher       static (CGO_ENABLED=0): starts on any Linux
#   podmpi-rsh     static: the ssh program mpirun starts once per worker, a
#                  small relay of the launcher's shared connections that runs
#                  the launcher's full client where no launcher shares
#                  (cmd/launcher/podmpi-rsh)
#   worker-agent   relative symlink to launcher, which checks that the image
#                  can run the real one (glibc's loader and libc of the
#                  versions it needs; exit 75 naming what is missing) and
#                  runs ../libexec/worker-agent
#   ../libexec/worker-agent
#                  the real worker-agent: cgo (NVML through dlopen), linked
#                  against Debian bullseye's glibc 2.31 as the C compiler's
#                  sysroot, so that it asks for no glibc symbol newer than
#                  PODMPI_GLIBC_MAX (2.28) and starts on UBI 8, Debian 11,
#                  Ubuntu 20.04 and later
#   ssh            relative symlink to podmpi-rsh
#   mpirun, mpiexec, mpiexec.hydra
#                  relative symlinks to launcher (`launcher names` lists
#                  every link and its target). With OUTDIR first on PATH,
#                  ssh is podmpi's client and mpirun runs the launcher's
#                  phases before the real mpirun found after it on PATH.
#
#   scripts/build.sh [OUTDIR]
#
# Environment:
#   GO, GOARCH          the Go command and target (default: go, the host's)
#   VERSION, COMMIT     stamped into both binaries (agent/version)
#   CC                  the C compiler (default gcc; aarch64-linux-gnu-gcc
#                       when GOARCH=arm64 on another architecture)
#   PODMPI_SYSROOT      the C sysroot worker-agent links against: a directory
#                       (default ${PODMPI_BULLSEYE_ROOTFS:-/var/cache/podmpi/bullseye-rootfs},
#                       built by scripts/bullseye-rootfs.sh when missing and
#                       when run as root), or "system" to use CC as it is (a
#                       build container whose own glibc is old enough)
#   PODMPI_GLIBC_MAX    newest glibc symbol version worker-agent may ask for
#
# When no sysroot can be had (not root, no debootstrap, no network), the
# build goes on against this machine's glibc and says loudly which glibc the
# binary then needs. When a sysroot or "system" was used and the binary still
# asks for a newer glibc than PODMPI_GLIBC_MAX, the build fails.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
out=${1:-bin}
go=${GO:-go}
max=${PODMPI_GLIBC_MAX:-2.28}
version=${VERSION:-devel}
commit=${COMMIT:-unknown}
ldflags="-s -w -X github.com/podmpi/podmpi/agent/version.Version=$version -X github.com/podmpi/podmpi/agent/version.Commit=$commit"
mkdir -p "$out" "$out/../libexec"
libexec=$(cd "$out/../libexec" && pwd)
cd "$root"

goarch=${GOARCH:-$("$go" env GOARCH)}
hostarch=$("$go" env GOHOSTARCH)
export GOARCH=$goarch GOOS=linux

echo "CGO_ENABLED=0 $go build -o $out/launcher ./cmd/launcher  ($goarch)"
CGO_ENABLED=0 "$go" build -trimpath -ldflags "$ldflags" -o "$out/launcher" ./cmd/launcher
echo "CGO_ENABLED=0 $go build -o $out/podmpi-rsh ./cmd/launcher/podmpi-rsh  ($goarch)"
if [ -L "$out/podmpi-rsh" ]; then
  rm -f "$out/podmpi-rsh" # a link to the launcher, from a build before the relay had its own binary
fi
CGO_ENABLED=0 "$go" build -trimpath -ldflags "-s -w" -o "$out/podmpi-rsh" ./cmd/launcher/podmpi-rsh

# Every link make build lays out, "name target": the launcher keeps the one
# list of them. A cross-compiled launcher cannot run here, so a host one is
# asked then.
if [ "$goarch" = "$hostarch" ]; then
  links=$("$out/launcher" names)
else
  links=$(GOARCH="$hostarch" CGO_ENABLED=0 "$go" run ./cmd/launcher names)
fi
if [ -f "$out/worker-agent" ] && [ ! -L "$out/worker-agent" ]; then
  rm -f "$out/worker-agent" # the real one, from a build before it moved to libexec/
fi
while read -r n target; do
  [ -n "$n" ] || continue
  if [ -e "$out/$n" ] && [ ! -L "$out/$n" ]; then
    echo "build: $out/$n exists and is not a symlink; not replacing it" >&2; exit 1
  fi
  ln -sfn "$target" "$out/$n"
  echo "$out/$n -> $target"
done <<<"$links"

# The C compiler and its sysroot for worker-agent.
case "$goarch" in
amd64) triplet=x86_64-linux-gnu ;;
arm64) triplet=aarch64-linux-gnu ;;
*) echo "build: GOARCH=$goarch: worker-agent is built for amd64 and arm64 only" >&2; exit 1 ;;
esac
cc=${CC:-gcc}
if [ "$goarch" != "$hostarch" ] && [ -z "${CC:-}" ]; then
  cc=$triplet-gcc
fi
command -v "${cc%% *}" >/dev/null || { echo "build: no C compiler $cc for GOARCH=$goarch (worker-agent needs cgo for NVML)" >&2; exit 1; }
sysroot=${PODMPI_SYSROOT:-${PODMPI_BULLSEYE_ROOTFS:-/var/cache/podmpi/bullseye-rootfs}}
fallback=
desc=
sysroot_ready() {
  [ -e "$1/usr/include/stdio.h" ] && [ -e "$1/usr/lib/$triplet/libc_nonshared.a" ]
}
if [ "$sysroot" = system ]; then
  ccline=$cc
  desc="the glibc of $cc ($(ldd --version 2>/dev/null | sed -n 1p))"
else
  if ! sysroot_ready "$sysroot" && [ -z "${PODMPI_SYSROOT:-}" ] && [ "$goarch" = "$hostarch" ]; then
    # The default root: build it once when we can (root, debootstrap,
    # a Debian mirror); the script says why when we cannot.
    why=$("$root/scripts/bullseye-rootfs.sh" 2>&1 | tail -1) || true
    echo "$why"
  fi
  if sysroot_ready "$sysroot"; then
    ccline="$cc --sysroot=$sysroot -B$sysroot/usr/lib/$triplet -L$sysroot/usr/lib/$triplet"
    desc="Debian $(cat "$sysroot/etc/debian_version" 2>/dev/null || echo '?')'s glibc in $sysroot"
  else
    ccline=$cc
    fallback="no sysroot with an old glibc in $sysroot (make one with: sudo scripts/bullseye-rootfs.sh)"
    desc="this machine's glibc ($(ldd --version 2>/dev/null | sed -n 1p))"
  fi
fi
agent=$libexec/worker-agent
echo "CGO_ENABLED=1 CC=\"$ccline\" $go build -o $agent ./cmd/worker-agent  ($goarch)"
# go-nvml's header marks functions deprecated that it still wraps: those
# warnings are not ours to fix.
CGO_ENABLED=1 CC="$ccline" CGO_CFLAGS="${CGO_CFLAGS:--O2 -g -Wno-deprecated-declarations}" \
  "$go" build -trimpath -ldflags "$ldflags" -o "$agent" ./cmd/worker-agent

# The newest glibc symbol version worker-agent asks for.
if command -v objdump >/dev/null; then
  syms=$(objdump -T "$agent")
elif command -v readelf >/dev/null; then
  syms=$(readelf --dyn-syms -W "$agent")
else
  echo "build: neither objdump nor readelf (binutils) to check $agent's glibc versions" >&2; exit 1
fi
need=$(grep -o 'GLIBC_[0-9.]*' <<<"$syms" | sed 's/GLIBC_//' | sort -V | tail -1)
need=${need:-none}
newest=$(printf '%s\n%s\n' "$need" "$max" | sort -V | tail -1)
if [ "$need" = none ] || [ "$newest" = "$max" ]; then
  echo "$agent: needs glibc >= $need (linked against $desc); starts on glibc $max and later"
  exit 0
fi
if [ -n "$fallback" ]; then
  {
    echo "################################################################################"
    echo "WARNING: $agent needs glibc >= $need: linked against $desc."
    echo "  It will not start on bases with an older glibc (UBI 8: 2.28, Debian 11: 2.31,"
    echo "  Ubuntu 20.04: 2.31). Cause: $fallback."
    echo "################################################################################"
  } >&2
  exit 0
fi
echo "build: $agent needs glibc >= $need although it was linked against $desc; want $max at most" >&2
exit 1
