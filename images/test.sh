#!/usr/bin/env bash
# make image-test: builds the binaries-only image for amd64 and arm64 and the
# Open MPI, MPICH, Intel MPI and Horovod images (images/build.sh, which
# fetches on this machine what they need: Go modules, Intel MPI's wheels,
# the Horovod wheel scripts/horovod-wheel.sh compiles and caches, or waits
# for when another run compiles it), and runs images/imagetest: the
# binaries image's content (only /opt/podmpi, both architectures, glibc 2.28,
# SBOM), its binaries copied into a Debian bullseye base and run there, and an
# MPI allreduce across podman containers started inside the test harness's
# network-namespace pods with
#   --user 1000680000:0 --passwd=false --read-only (only /tmp writable)
#   --cap-drop=ALL --security-opt no-new-privileges
# Needs root, podman, runc, dnsmasq, iproute2, debootstrap and the network for
# apt (on a fresh machine about 10 minutes; the arm64 image's compile, which
# no MPI image here needs, runs beside the MPI images' builds; warm about 5).
# Containers and pods are removed by name/PID when the test ends.
#
# Arguments go to "go test"; PODMPI_IMAGE_TEST_BUILD=0 skips the build and
# tests the images already built. To repeat only the MPICH allreduce:
#   PODMPI_IMAGE_TEST_BUILD=0 images/test.sh -run TestAllreduceAcrossContainers/mpich -count=30
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=images/lib.sh
. "$here/lib.sh"
PODMPI_ENGINE=podman
engine_init
export PODMPI_PODMAN_FLAGS PODMPI_ULIMITS
export PODMPI_IMAGE_PREFIX=${PODMPI_IMAGE_PREFIX:-podmpi}
# One tag for build.sh and the test: the tree's version, as make release
# and make cluster-up tag it, so that they find these images.
PODMPI_TAG=${PODMPI_TAG:-$("$root/scripts/version.sh")}
export PODMPI_TAG
export PODMPI_PLATFORMS=${PODMPI_PLATFORMS:-linux/$(host_arch),linux/$([[ $(host_arch) == arm64 ]] && echo amd64 || echo arm64)}
# The podmpi image's build shares this machine's Go caches (what make build
# and make test compiled is not compiled again), and the MPI images and
# their stand-in bases build side by side.
export PODMPI_GO_CACHE=${PODMPI_GO_CACHE:-host} PODMPI_PARALLEL=${PODMPI_PARALLEL:-1}
start=$(date +%s)
if [[ "${PODMPI_IMAGE_TEST_BUILD:-1}" != 0 ]]; then
	"$here/build.sh" podmpi openmpi mpich intelmpi horovod
fi
built=$(date +%s)
cd "$root"
PODMPI_IMAGE_TEST=1 go test -count=1 -timeout 15m -v ./images/imagetest/ "$@"
end=$(date +%s)
note "image-test: build $((built - start)) s, tests $((end - built)) s"
