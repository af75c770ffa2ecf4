#!/usr/bin/env bash
# make demo: one command on a fresh Debian/Ubuntu machine with Go, as root.
# Builds the binaries, installs the missing Debian packages, then runs a real
# Open MPI allreduce across 3 worker pods (network namespaces with cluster
# DNS) through worker-agent and launcher, prints the launcher's report and the
# job's output, and tears everything down (test/e2e/cmd/demo).
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"

# shellcheck source=scripts/lib.sh
. scripts/lib.sh
require_root_and_go demo "it creates network namespaces, bind mounts and a DNS server"
install_missing demo openmpi-bin libopenmpi-dev gcc libc6-dev dnsmasq-base iproute2 util-linux

echo "== make build"
make --no-print-directory build >/dev/null
exec go run ./test/e2e/cmd/demo --bin bin "$@"
