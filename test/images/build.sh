#!/usr/bin/env bash
# Builds the test images that are not ours: users' images with only their
# MPI stack (test/images/<name>.Dockerfile), for the "bring your own image"
# tests on the cluster (test/cluster/e2e/byoi_test.go).
#
#   test/images/build.sh [openmpi4] [openmpi5] [mpich] [intelmpi] [horovod] [musl] [nompi]
#                                                        (default: all seven)
#
# None of them has podmpi, an sshd or a USER line; the podmpi runtimes bring
# podmpi (an init container copies /opt/podmpi into the pod) and the
# non-root user. Each image is tagged localhost/podmpi-test/<name>:<key>,
# where <key> is a hash of its Dockerfile and of every file it copies (and,
# for horovod, of the cached wheel's key), so that it is built once per
# machine and reused by every test and every later run; a changed input
# makes a new tag. The images build side by side (each waits mostly on apt).
# Output: one line per image on stdout,
#
#   IMAGE <name> <reference> <seconds it took, 0 when it was there>
#
# and the progress on stderr. Bases come as images/build.sh has them
# (pulled, else debootstrap stand-ins: images/standin.sh). Intel MPI
# installs the wheels scripts/intelmpi.sh caches (run first when missing;
# a build volume at /wheels: nothing from PyPI inside the build); Horovod
# the wheel scripts/horovod-wheel.sh caches (the build context
# horovod-wheels; without it the build compiles Horovod, minutes).
#
#   PODMPI_TEST_IMAGE_LOGS  where the build logs go (default
#                           ${TMPDIR:-/tmp}/podmpi-test-image-logs)
#   PODMPI_INTELMPI_WHEELS  the Intel MPI wheels (default: scripts/intelmpi.sh's cache)
#   PODMPI_HOROVOD_CACHE    scripts/horovod-wheel.sh's cache (default /var/cache/podmpi/horovod)
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../.." && pwd)
# shellcheck source=images/lib.sh
. "$root/images/lib.sh"
# shellcheck source=images/standin.sh
. "$root/images/standin.sh"

all=(openmpi4 openmpi5 mpich intelmpi horovod musl nompi)
want=("$@")
[[ ${#want[@]} -gt 0 ]] || want=("${all[@]}")
for w in "${want[@]}"; do
	[[ -f "$here/$w.Dockerfile" ]] || die "unknown test image $w (have: ${all[*]})"
done

engine_init
trap 'wait' EXIT
# One build at a time: a second run (.ci/run starts one in the background,
# the cluster tests another) waits here, then finds the images built.
lock=${TMPDIR:-/tmp}/podmpi-test-images.lock
exec 9>"$lock"
flock 9
logdir=${PODMPI_TEST_IMAGE_LOGS:-${TMPDIR:-/tmp}/podmpi-test-image-logs}
mkdir -p "$logdir"

# inputs NAME: the files the image's build copies (the build context holds
# exactly these).
inputs() {
	case "$1" in
	openmpi4 | openmpi5 | mpich | intelmpi) echo "$root/images/src/allreduce.c" ;;
	horovod) echo "$root/images/src/horovod_allreduce.py $root/scripts/horovod-wheel.sh $root/scripts/lib.sh" ;;
	esac
}

# base NAME: the Debian base of the image's Dockerfile (its ARG default).
base() { sed -n 's/^ARG BASE_IMAGE=//p' "$here/$1.Dockerfile"; }

intel_version=$(sed -n 's/^ARG INTEL_MPI_VERSION=//p' "$here/intelmpi.Dockerfile")
intel_wheels=${PODMPI_INTELMPI_WHEELS:-/var/cache/podmpi/intelmpi-$intel_version/wheels}
hvd_wheels=${PODMPI_HOROVOD_CACHE:-/var/cache/podmpi/horovod}/wheels

# key NAME: the tag, a hash of what the image is made of.
key() {
	local f extra=
	# shellcheck disable=SC2046 # the inputs are paths without spaces
	if [[ "$1" == horovod && -d "$hvd_wheels" ]]; then
		extra=$(cat "$hvd_wheels"/*/key 2>/dev/null || true)
	fi
	{
		cat "$here/$1.Dockerfile"
		for f in $(inputs "$1"); do
			sha256sum <"$f"
		done
		echo "$extra"
	} | sha256sum | cut -c1-12
}

# Missing Intel MPI wheels: scripts/intelmpi.sh caches them (PyPI, on the
# host; flock'd, so a concurrent run waits for the other).
if [[ " ${want[*]} " == *" intelmpi "* && ! -d "$intel_wheels" ]]; then
	note "no Intel MPI wheels in $intel_wheels: scripts/intelmpi.sh"
	"$root/scripts/intelmpi.sh" >&2 || die "scripts/intelmpi.sh failed: the Intel MPI test image needs its wheels"
fi

todo=()
for w in "${want[@]}"; do
	ref=localhost/podmpi-test/$w:$(key "$w")
	if image_exists "$ref"; then
		echo "IMAGE $w $ref 0"
	else
		todo+=("$w")
	fi
done
[[ ${#todo[@]} -gt 0 ]] || exit 0

mapfile -t bases < <(for w in "${todo[@]}"; do base "$w"; done | sort -u)
pids=()
for b in "${bases[@]}"; do
	ensure_base "$b" &
	pids+=($!)
done
for p in "${pids[@]}"; do
	wait "$p" || die "a base image could not be had (see above)"
done

# build NAME: one image, in a build context of its own inputs only.
build() {
	local w=$1 ref ctx start log=$logdir/$1.log f
	local -a args
	ref=localhost/podmpi-test/$w:$(key "$w")
	ctx=$(mktemp -d "${TMPDIR:-/tmp}/podmpi-test-image.XXXXXX")
	# shellcheck disable=SC2064 # expand now: the path is fixed
	trap "rm -rf '$ctx'" RETURN
	for f in $(inputs "$w"); do
		cp "$f" "$ctx/"
	done
	args=(--network=host "${ULIMITS[@]}" -t "$ref" -f "$here/$w.Dockerfile")
	case "$w" in
	intelmpi) args+=(-v "$intel_wheels:/wheels:ro,z") ;;
	horovod) [[ -d "$hvd_wheels" ]] && args+=(--build-context horovod-wheels="$hvd_wheels") ;;
	esac
	note "building $ref (log: $log)"
	start=$(date +%s)
	if ! "${ENGINE[@]}" build "${args[@]}" "$ctx" >"$log" 2>&1; then
		tail -25 "$log" >&2
		note "FAILED $w after $(($(date +%s) - start)) s (last lines above, full log: $log)"
		return 1
	fi
	echo "IMAGE $w $ref $(($(date +%s) - start))"
	note "built $ref in $(($(date +%s) - start)) s"
}

declare -A jobs=()
for w in "${todo[@]}"; do
	build "$w" &
	jobs[$w]=$!
done
failed=()
for w in "${!jobs[@]}"; do
	wait "${jobs[$w]}" || failed+=("$w")
done
[[ ${#failed[@]} -eq 0 ]] || die "test images that did not build: ${failed[*]}"
# Each image's older tags (an input changed since) go, with the layers only
# they held: every change would otherwise leave hundreds of MB behind.
for w in "${todo[@]}"; do
	keep=localhost/podmpi-test/$w:$(key "$w")
	mapfile -t old < <("${ENGINE[@]}" images --format '{{.Repository}}:{{.Tag}}' | grep -E "^localhost/podmpi-test/$w:" | grep -vxF "$keep" || true)
	if [[ ${#old[@]} -gt 0 ]]; then
		"${ENGINE[@]}" rmi "${old[@]}" >/dev/null 2>&1 || note "some older tags of $w were kept: in use"
	fi
done
