#!/usr/bin/env bash
# make image-test: builds the Open MPI and MPICH images (images/build.sh) and
# runs images/imagetest, an MPI allreduce across podman containers started
# inside the test harness's network-namespace pods with
#   --user 1000680000:0 --passwd=false --read-only (only /tmp writable)
#   --cap-drop=ALL --security-opt no-new-privileges
# Needs root, podman, runc, dnsmasq, iproute2, debootstrap and the network for
# apt (first build about 5 minutes here; with a warm layer cache about 1).
# Containers and pods are removed by name/PID when the test ends.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=images/lib.sh
. "$here/lib.sh"
PODMPI_ENGINE=podman
engine_init
export PODMPI_PODMAN_FLAGS PODMPI_ULIMITS
export PODMPI_IMAGE_PREFIX=${PODMPI_IMAGE_PREFIX:-podmpi}
start=$(date +%s)
"$here/build.sh" openmpi mpich
built=$(date +%s)
cd "$root"
PODMPI_IMAGE_TEST=1 go test -count=1 -timeout 15m -v ./images/imagetest/ "$@"
end=$(date +%s)
note "image-test: build $((built - start)) s, allreduce test $((end - built)) s"
