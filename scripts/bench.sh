#!/usr/bin/env bash
# make bench: every figure of BENCHMARKS.md with its OpenSSH / shell baseline,
# taken in one run on network-namespace pods (root). Installs the Debian
# packages it lacks, builds the driver (test/bench/cmd/podmpi-bench), runs
# it against bin/launcher and bin/worker-agent (make build), and writes
# docs/bench/{raw.csv,summary.md,init-vs-n.csv,init-vs-n.png}. Everything it
# starts is stopped by PID and every namespace removed, also on Ctrl-C.
#
# Extra arguments go to the driver, e.g.:
#   ./scripts/bench.sh --reps 0.3            quick look (fewer repetitions)
#   ./scripts/bench.sh --only rsh,mem        some sections only
#   ./scripts/bench.sh --only footprint --footprint 8,32,64,128   launcher pod memory and descriptors at other N
#   ./scripts/bench.sh --shell-scale 16,64,256,1024   measure the shell baseline at 1024 too (~4 min more)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"

# shellcheck source=scripts/lib.sh
. scripts/lib.sh
require_root_and_go bench "network namespaces, bind mounts, a DNS server"
install_missing bench openmpi-bin libopenmpi-dev mpich libmpich-dev gcc libc6-dev openssh-client openssh-server \
  dnsmasq-base iproute2 util-linux bind9-dnsutils python3-matplotlib
for b in bin/launcher bin/worker-agent; do
  [ -x "$b" ] || { echo "bench: $b missing; run make build (make bench does)"; exit 1; }
done

drv=$(mktemp -d /tmp/podmpi-bench-drv.XXXXXX)
trap 'rm -rf "$drv"' EXIT
CGO_ENABLED=0 go build -o "$drv/podmpi-bench" ./test/bench/cmd/podmpi-bench
"$drv/podmpi-bench" --bin bin --out docs/bench "$@"
