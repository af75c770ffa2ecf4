#!/usr/bin/env bash
# make image-test: builds the binaries-only image for amd64 and arm64 and the
# Open MPI, MPICH, Intel MPI and Horovod images (images/build.sh; the Horovod
# image from the wheel scripts/horovod-wheel.sh caches, which this script
# builds first unless cached, or waits for when another run builds it), and
# runs images/imagetest: the
# binaries image's content (only /opt/podmpi, both architectures, glibc 2.28,
# SBOM), its binaries copied into a Debian bullseye base and run there, and an
# MPI allreduce across podman containers started inside the test harness's
# network-namespace pods with
#   --user 1000680000:0 --passwd=false --read-only (only /tmp writable)
#   --cap-drop=ALL --security-opt no-new-privileges
# Needs root, podman, runc, dnsmasq, iproute2, debootstrap and the network for
# apt (on a fresh machine about 10 minutes, 4.5 of them the arm64 compile;
# warm about 5).
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
# One tag for build.sh and the test.
PODMPI_TAG=${PODMPI_TAG:-$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo devel)}
export PODMPI_TAG
export PODMPI_PLATFORMS=${PODMPI_PLATFORMS:-linux/$(host_arch),linux/$([[ $(host_arch) == arm64 ]] && echo amd64 || echo arm64)}
# The podmpi image's build shares this machine's Go caches (what make build
# and make test compiled is not compiled again), and the MPI images and
# their stand-in bases build side by side.
export PODMPI_GO_CACHE=${PODMPI_GO_CACHE:-host} PODMPI_PARALLEL=${PODMPI_PARALLEL:-1}
start=$(date +%s)
if [[ "${PODMPI_IMAGE_TEST_BUILD:-1}" != 0 ]]; then
	# The Horovod wheel first: in .ci/run make test's TestHorovod has already
	# waited for it (a fraction of a second here); on a fresh machine this
	# compiles it (about 8 CPU-minutes). Without it the Horovod image compiles
	# Horovod itself, as a build elsewhere does.
	hvd_log=${TMPDIR:-/tmp}/podmpi-horovod-wheel.log
	hvd_start=$(date +%s)
	if "$root/scripts/horovod-wheel.sh" >"$hvd_log" 2>&1; then
		note "horovod wheel ready in $(($(date +%s) - hvd_start)) s ($(tail -1 "$hvd_log"))"
	else
		tail -5 "$hvd_log" >&2
		note "no cached Horovod wheel (above): the Horovod image compiles it"
	fi
	# The Intel MPI image installs the wheels scripts/intelmpi.sh caches
	# (a no-op when cached; without them its build downloads them).
	"$root/scripts/intelmpi.sh" || note "Intel MPI wheels not cached: the intelmpi image downloads them from PyPI"
	"$here/build.sh" podmpi openmpi mpich intelmpi horovod
fi
built=$(date +%s)
cd "$root"
PODMPI_IMAGE_TEST=1 go test -count=1 -timeout 15m -v ./images/imagetest/ "$@"
end=$(date +%s)
note "image-test: build $((built - start)) s, tests $((end - built)) s"
