#!/usr/bin/env bash
# Builds podmpi's images with podman or docker.
#
#   images/build.sh [podmpi] [openmpi] [mpich] [intelmpi] [horovod]    (default: all five)
#
# podmpi is the binaries-only image (FROM scratch, /opt/podmpi); the MPI images
# copy /opt/podmpi from it, so it is built first whenever an MPI image is asked
# for. Each image is tagged <prefix>/<name>:<tag> and <prefix>/<name>:latest
# (for podmpi: the image of this machine's platform), with
#   PODMPI_IMAGE_PREFIX   default podmpi (podman stores it as localhost/podmpi)
#   PODMPI_TAG            default: git describe of the work tree, else "devel"
#   PODMPI_PLATFORMS      platforms of the podmpi image, comma-separated
#                         (default: this machine's, e.g. linux/amd64). With
#                         several (linux/amd64,linux/arm64) each is tagged
#                         <tag>-<arch>; push those and join them in a manifest
#                         list in the registry (build.sh prints how). No
#                         emulation is needed: the build stage cross-compiles.
#                         The MPI images are built for this machine's platform.
#   PODMPI_PREBUILT       a folder laid out as "make build" lays out ./bin
#                         (scripts/build.sh: launcher, podmpi-rsh,
#                         worker-agent linked against Debian bullseye's
#                         glibc, the symlinks; nothing else is copied): the
#                         podmpi image is made from those binaries (SBOM
#                         written here) instead of compiling them in a build
#                         container, and no Go or bullseye base is needed.
#                         This machine's platform only.
#   PODMPI_PARALLEL       1: build the MPI images side by side, and their
#                         stand-in bases beside the podmpi image
#   PODMPI_GO_CACHE       host: the podmpi image's build stage shares this
#                         machine's Go build and module caches (podman)
# Builds use the host network (RUN apt-get, go mod download). Base images that
# cannot be pulled are replaced by local stand-ins (see standin.sh) for Debian
# and Go. The Intel MPI image installs PyPI's wheels: with podman, the ones
# scripts/intelmpi.sh cached are mounted at /wheels for its RUN steps
# (PODMPI_INTELMPI_WHEELS names another folder), else pip downloads them.
# The Horovod image needs PyPI, and compiles Horovod unless
# scripts/horovod-wheel.sh has cached a wheel of the image's key:
#   PODMPI_HOROVOD_CACHE  that script's cache (default /var/cache/podmpi/horovod),
#                         whose wheels/ folder is passed as the build context
#                         horovod-wheels when it exists.
# A failed image does not stop the others; the exit status is non-zero when
# any failed, and the summary names them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=images/lib.sh
. "$here/lib.sh"
# shellcheck source=images/standin.sh
. "$here/standin.sh"

all=(podmpi openmpi mpich intelmpi horovod)
want=("$@")
[[ ${#want[@]} -gt 0 ]] || want=("${all[@]}")
for w in "${want[@]}"; do
	[[ -f "$here/$w.Dockerfile" ]] || die "unknown image $w (have: ${all[*]})"
done
# The MPI images need the podmpi image: build it first.
if [[ " ${want[*]} " != *" podmpi "* ]]; then
	want=(podmpi "${want[@]}")
fi

engine_init
# The side-by-side builds (PODMPI_PARALLEL) are children of this shell: it
# ends only after them, also when it stops early.
trap 'wait' EXIT
prefix=${PODMPI_IMAGE_PREFIX:-podmpi}
version=$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo devel)
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
tag=${PODMPI_TAG:-$version}
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
go_image=${GO_IMAGE:-docker.io/library/golang:1.26-bookworm}
build_image=${BUILD_IMAGE:-docker.io/library/debian:bullseye-slim}
hostarch=$(host_arch)
IFS=, read -r -a platforms <<<"${PODMPI_PLATFORMS:-linux/$hostarch}"
# Outside the build context: a log written there would change the context
# and defeat the layer cache of the next image.
logdir=${PODMPI_BUILD_LOGS:-${TMPDIR:-/tmp}/podmpi-image-logs}
mkdir -p "$logdir"

prebuilt=${PODMPI_PREBUILT:-}
if [[ -n "$prebuilt" ]]; then
	for b in "${podmpi_binaries[@]}"; do
		[[ -x "$prebuilt/$b" && ! -L "$prebuilt/$b" ]] ||
			die "PODMPI_PREBUILT=$prebuilt has no binary $b (make build BIN=$prebuilt makes ${podmpi_binaries[*]})"
	done
	[[ "${platforms[*]}" == "linux/$hostarch" ]] || die "PODMPI_PREBUILT builds this machine's platform only (linux/$hostarch), not ${platforms[*]}"
fi

# Bases of the images asked for (FROM lines after ARG defaults).
if [[ -z "$prebuilt" ]]; then
	if [[ "${PODMPI_PARALLEL:-0}" == 1 ]]; then
		ensure_base "$go_image" &
		go_pid=$!
		build_ok=1
		ensure_base "$build_image" || build_ok=0
		wait "$go_pid" || die "no Go image $go_image (see above)"
		[[ $build_ok -eq 1 ]] || die "no build image $build_image (see above)"
	else
		ensure_base "$go_image"
		ensure_base "$build_image"
	fi
fi
bases=()
for w in "${want[@]}"; do
	case "$w" in
	openmpi | intelmpi | horovod) bases+=(docker.io/library/debian:bookworm-slim) ;;
	mpich) bases+=(docker.io/library/debian:trixie-slim) ;;
	esac
done
mapfile -t bases < <(printf '%s\n' "${bases[@]}" | sort -u | sed '/^$/d')
base_pids=()
if [[ "${PODMPI_PARALLEL:-0}" == 1 ]]; then
	# Each stand-in is a debootstrap: network and dpkg, side by side with
	# each other and with the podmpi image's build (waited for before the
	# MPI images).
	for b in "${bases[@]}"; do
		ensure_base "$b" &
		base_pids+=($!)
	done
else
	for b in "${bases[@]}"; do
		ensure_base "$b"
	done
fi

common_args=(--network=host "${ULIMITS[@]}"
	--build-arg GO_IMAGE="$go_image" --build-arg BUILD_IMAGE="$build_image"
	--build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg CREATED="$created")

# PODMPI_GO_CACHE=host: the podmpi image's build stage uses this machine's Go
# build and module caches (podman build volumes; not committed to any
# layer), so that it compiles only what "make build" has not: the binaries
# are the same (-trimpath), the build takes seconds instead of minutes when
# the Go in the build image is this machine's (images/test.sh sets it).
go_cache_args=()
if [[ "${PODMPI_GO_CACHE:-}" == host && -z "$prebuilt" ]]; then
	if [[ "${ENGINE[0]}" != podman ]]; then
		note "PODMPI_GO_CACHE=host needs podman (docker build takes no volumes): building with the build stage's own caches"
	elif gocache=$(go env GOCACHE 2>/dev/null) && gomodcache=$(go env GOMODCACHE 2>/dev/null) && [[ -n "$gocache" && -n "$gomodcache" ]]; then
		mkdir -p "$gocache" "$gomodcache"
		go_cache_args=(-v "$gocache:/root/.cache/go-build:z" -v "$gomodcache:/go/pkg/mod:z")
	else
		note "PODMPI_GO_CACHE=host: no go command here to name its caches; building with the build stage's own"
	fi
fi

# The Intel MPI image's wheels, as scripts/intelmpi.sh caches them (the
# versions are the Dockerfile's), mounted read-only for its RUN steps
# (podman build volumes; nothing of them is committed to a layer).
intelmpi_wheels_args=()
if [[ " ${want[*]} " == *" intelmpi "* && "${ENGINE[0]}" == podman ]]; then
	wheels=${PODMPI_INTELMPI_WHEELS:-/var/cache/podmpi/intelmpi-$(sed -n 's/^ARG INTEL_MPI_VERSION=//p' "$here/intelmpi.Dockerfile")/wheels}
	if [[ -d "$wheels" ]]; then
		intelmpi_wheels_args=(-v "$wheels:/wheels:ro,z")
	else
		note "no Intel MPI wheels in $wheels (scripts/intelmpi.sh caches them): pip downloads them from PyPI"
	fi
fi

failed=()
built=()
# build_one NAME DOCKERFILE LOG ARGS...: one engine build, timed and logged.
build_one() {
	local what=$1 file=$2 log=$3 start
	shift 3
	note "building $what with ${ENGINE[0]} (log: $log)"
	start=$(date +%s)
	if "${ENGINE[@]}" build "${common_args[@]}" "$@" -f "$file" "$root" >"$log" 2>&1; then
		note "built $what in $(($(date +%s) - start)) s"
		return 0
	fi
	tail -25 "$log" >&2
	note "FAILED $what after $(($(date +%s) - start)) s (last lines above, full log: $log)"
	return 1
}

# build_prebuilt NAME LOG TAGS...: the podmpi image from PODMPI_PREBUILT:
# /opt/podmpi laid out by layout.sh, as the build stage of podmpi.Dockerfile
# lays it out (bin, sbom, LICENSE, NOTICE), copied into the same final stage.
build_prebuilt() {
	local what=$1 log=$2 ctx start
	shift 2
	start=$(date +%s)
	note "building $what from the binaries in $prebuilt (log: $log)"
	ctx=$(mktemp -d "${TMPDIR:-/tmp}/podmpi-prebuilt.XXXXXX")
	# shellcheck disable=SC2064 # expand now: the path is fixed
	trap "rm -rf '$ctx'" RETURN
	if ! {
		CREATED="$created" VERSION="$version" "$here/layout.sh" "$prebuilt" "$ctx/out/opt/podmpi" &&
			sed -n '/^FROM scratch/,$p' "$here/podmpi.Dockerfile" | sed 's|^COPY --from=build /out/opt/podmpi|COPY out/opt/podmpi|' >"$ctx/Containerfile" &&
			"${ENGINE[@]}" build "${common_args[@]}" "$@" -f "$ctx/Containerfile" "$ctx"
	} >"$log" 2>&1; then
		tail -25 "$log" >&2
		note "FAILED $what after $(($(date +%s) - start)) s (last lines above, full log: $log)"
		return 1
	fi
	note "built $what in $(($(date +%s) - start)) s"
}

# The podmpi image, for every platform asked for.
name="$prefix/podmpi"
podmpi_ref=
ok=1
for p in "${platforms[@]}"; do
	arch=${p##*/}
	tags=(-t "$name:$tag-$arch")
	if [[ "$arch" == "$hostarch" ]]; then
		tags+=(-t "$name:$tag" -t "$name:latest")
	fi
	if [[ -n "$prebuilt" ]]; then
		if build_prebuilt "$name:$tag-$arch" "$logdir/podmpi-$arch.log" "${tags[@]}"; then
			built+=("$name:$tag-$arch")
			podmpi_ref=$(local_ref "$name:$tag-$arch")
		else
			ok=0
		fi
		continue
	fi
	# BUILDPLATFORM explicitly: podman 4.3 leaves it unset, and the build
	# stage would then run (emulated) on the target platform.
	if build_one "$name:$tag-$arch ($p)" "$here/podmpi.Dockerfile" "$logdir/podmpi-$arch.log" \
		--platform "$p" --build-arg BUILDPLATFORM="linux/$hostarch" "${go_cache_args[@]}" "${tags[@]}"; then
		built+=("$name:$tag-$arch")
		[[ "$arch" == "$hostarch" ]] && podmpi_ref=$(local_ref "$name:$tag-$arch")
	else
		ok=0
	fi
done
if [[ $ok -eq 1 && ${#platforms[@]} -gt 1 ]]; then
	# No local manifest list: podman 4.3 lists of local images break
	# "podman images". Publishing one takes the registry:
	note "multi-arch: push $(printf "$name:$tag-%s " "${platforms[@]##*/}")then join them, e.g."
	note "  podman manifest create REGISTRY/podmpi:$tag; podman manifest add REGISTRY/podmpi:$tag docker://REGISTRY/podmpi:$tag-<arch> (each); podman manifest push --all REGISTRY/podmpi:$tag"
fi
[[ $ok -eq 1 ]] || failed+=(podmpi)

# The MPI images, from the podmpi image of this machine's platform (side by
# side with PODMPI_PARALLEL=1: each waits mostly on apt, not on the CPU).
for p in "${base_pids[@]}"; do
	wait "$p" || die "a base image could not be had (see above)"
done
declare -A pids=()
for w in "${want[@]}"; do
	[[ "$w" == podmpi ]] && continue
	name="$prefix/$w"
	if [[ -z "$podmpi_ref" ]]; then
		note "SKIPPED $name: no podmpi image for linux/$hostarch (add it to PODMPI_PLATFORMS, or see the failure above)"
		failed+=("$w")
		continue
	fi
	args=("$name:$tag" "$here/$w.Dockerfile" "$logdir/$w.log" --build-arg PODMPI_IMAGE="$podmpi_ref" -t "$name:$tag" -t "$name:latest")
	[[ "$w" == intelmpi ]] && args+=("${intelmpi_wheels_args[@]}")
	hvd_wheels=${PODMPI_HOROVOD_CACHE:-/var/cache/podmpi/horovod}/wheels
	if [[ "$w" == horovod && -d "$hvd_wheels" ]]; then
		# The wheels scripts/horovod-wheel.sh compiled (horovod.Dockerfile's
		# horovod-wheels stage): the image's build installs the one of its key.
		args+=(--build-context horovod-wheels="$hvd_wheels")
	fi
	if [[ "${PODMPI_PARALLEL:-0}" == 1 ]]; then
		build_one "${args[@]}" &
		pids[$w]=$!
	elif build_one "${args[@]}"; then
		built+=("$name:$tag")
	else
		failed+=("$w")
	fi
done
for w in "${!pids[@]}"; do
	if wait "${pids[$w]}"; then
		built+=("$prefix/$w:$tag")
	else
		failed+=("$w")
	fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
	die "images that did not build: ${failed[*]}"
fi
note "images: ${built[*]}"
