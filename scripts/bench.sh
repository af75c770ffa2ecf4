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
#   ./scripts/bench.sh --shell-scale 16,64,256,1024   measure the shell baseline at 1024 too (~4 min more)
set -euo pipefail
cd "$(dirname "$0")/.."
export PATH="$PATH:/usr/local/go/bin:/usr/sbin:/sbin"

if [ "$(id -u)" -ne 0 ]; then
  echo "bench: needs root (network namespaces, bind mounts, a DNS server); run: sudo make bench"
  exit 1
fi
if ! command -v go >/dev/null; then
  echo "bench: needs Go (https://go.dev/dl/) in PATH or /usr/local/go/bin"
  exit 1
fi

need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
for pkg in openmpi-bin libopenmpi-dev mpich libmpich-dev gcc libc6-dev openssh-client openssh-server \
           dnsmasq-base iproute2 util-linux bind9-dnsutils python3-matplotlib; do
  have "$pkg" || need+=("$pkg")
done
if [ "${#need[@]}" -gt 0 ]; then
  if ! command -v apt-get >/dev/null; then
    echo "bench: missing packages ${need[*]} and no apt-get to install them"
    exit 1
  fi
  echo "== apt-get install ${need[*]}"
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq >/dev/null
  apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
fi
for b in bin/launcher bin/worker-agent; do
  [ -x "$b" ] || { echo "bench: $b missing; run make build (make bench does)"; exit 1; }
done

drv=$(mktemp -d /tmp/podmpi-bench-drv.XXXXXX)
trap 'rm -rf "$drv"' EXIT
CGO_ENABLED=0 go build -o "$drv/podmpi-bench" ./test/bench/cmd/podmpi-bench
"$drv/podmpi-bench" --bin bin --out docs/bench "$@"
