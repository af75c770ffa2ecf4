#!/usr/bin/env bash
# make demo: one command on a fresh Debian/Ubuntu machine with Go, as root.
# Builds the binaries, installs the missing Debian packages, then runs a real
# Open MPI allreduce across 3 worker pods (network namespaces with cluster
# DNS) through worker-agent and launcher, prints the launcher's report and the
# job's output, and tears everything down (test/e2e/cmd/demo).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"

if [ "$(id -u)" -ne 0 ]; then
  echo "demo: needs root (it creates network namespaces, bind mounts and a DNS server); run: sudo make demo"
  exit 1
fi
if ! command -v go >/dev/null; then
  echo "demo: needs Go (https://go.dev/dl/) in PATH or /usr/local/go/bin"
  exit 1
fi

# Debian packages: install only what is missing.
need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for pkg in openmpi-bin libopenmpi-dev gcc libc6-dev dnsmasq-base iproute2 util-linux; do
  have "$pkg" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "demo: missing packages ${need[*]} and no apt-get to install them"
    exit 1
  fi
  echo "== apt-get install ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi

echo "== make build"
make --no-print-directory build >/dev/null
exec go run ./test/e2e/cmd/demo --bin bin "$@"
