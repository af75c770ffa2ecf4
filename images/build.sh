#!/usr/bin/env bash
# Builds podmpi's images with podman or docker.
#
#   images/build.sh [podmpi] [openmpi] [mpich] [intelmpi] [horovod]    (default: all five)
#
# podmpi is the binaries-only image (FROM scratch, /opt/podmpi); the MPI images
# copy /opt/podmpi from it, so it is built first whenever an MPI image is asked
# for. Each image is tagged <prefix>/<name>:<tag>-<arch> for every
# architecture it is built for, and, for this machine's, also
# <prefix>/<name>:<tag> and <prefix>/<name>:latest, with
#   PODMPI_IMAGE_PREFIX   default podmpi (podman stores it as localhost/podmpi)
#   PODMPI_VERSION        the version stamped into the binaries and the
#                         images' labels (default: scripts/version.sh, the
#                         work tree's, e.g. v0.0.0-3479b6c)
#   PODMPI_TAG            default PODMPI_VERSION
#   PODMPI_CREATED        the images' and the SBOM's creation time (default:
#                         scripts/version.sh --created, the last commit's
#                         time: building the same tree again gives the same
#                         layers, and the layer cache holds)
#   PODMPI_PLATFORMS      platforms of the podmpi image, comma-separated
#                         (default: this machine's, e.g. linux/amd64). No
#                         emulation is needed: the build stage
#                         cross-compiles. scripts/release.sh pushes them
#                         and joins them in one manifest list per image.
#   PODMPI_MPI_PLATFORMS  platforms of the MPI images (default: this
#                         machine's). Another architecture's runs their RUN
#                         steps under emulation (qemu-user-static through
#                         binfmt_misc: build.sh says how when it is missing)
#                         and needs the podmpi image of that architecture,
#                         which is then built too. Intel MPI's wheels exist
#                         for x86_64 only, and Horovod would compile for
#                         hours under emulation: those two are built for
#                         amd64 only (a line says so for any other).
#   PODMPI_PREBUILT       a folder laid out as "make build" lays out ./bin
#                         (scripts/build.sh: launcher, podmpi-rsh,
#                         worker-agent linked against Debian bullseye's
#                         glibc, the symlinks; nothing else is copied): the
#                         podmpi image of this machine's platform is made
#                         from those binaries (SBOM written here) instead of
#                         compiling them in a build container; other
#                         platforms still cross-compile in the build stage.
#   PODMPI_PARALLEL       1: build the MPI images side by side, and their
#                         stand-in bases beside the podmpi image
#   PODMPI_GO_CACHE       host: the podmpi image's build stage shares this
#                         machine's Go build cache too (podman)
#
# What the builds would fetch over HTTPS from inside their containers is
# fetched on this machine first, with this machine's trust (a
# TLS-inspecting proxy whose CA the host trusts and a container does not
# breaks pip and go inside the build), and handed to the build:
#   - Go modules: "go mod download" here, and this machine's module cache
#     mounted at /go/pkg/mod for the podmpi image's build stage (podman), so
#     that its own "go mod download" finds every module and fetches nothing;
#   - the Intel MPI image's wheels: scripts/intelmpi.sh --wheels (cached in
#     /var/cache/podmpi/intelmpi-<version>, PODMPI_INTELMPI_CACHE moves it;
#     PODMPI_INTELMPI_WHEELS names a folder of them instead), mounted at
#     /wheels for its RUN steps (podman), where pip installs with
#     --no-index;
#   - the Horovod image's wheel: scripts/horovod-wheel.sh compiles it here
#     once (about 8 CPU-minutes, cached in PODMPI_HOROVOD_CACHE, default
#     /var/cache/podmpi/horovod), whose wheels/ folder is passed as the build
#     context horovod-wheels, and the image installs it with --no-index (it
#     compiles Horovod itself, from PyPI, only when this machine's Debian
#     release differs from the image's: another key).
# When a fetch here fails, a line says so and the build tries from inside
# the container, as a plain "podman build" of the Dockerfile does. apt in
# the RUN steps uses http://deb.debian.org (the Debian images' sources):
# no TLS, so a TLS-inspecting proxy does not touch it (apt checks Debian's
# signatures, not a certificate). Base images that cannot be pulled are
# replaced by local stand-ins (see standin.sh) for Debian and Go. Builds use
# the host network.
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
version=${PODMPI_VERSION:-$("$root/scripts/version.sh")}
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
tag=${PODMPI_TAG:-$version}
created=${PODMPI_CREATED:-$("$root/scripts/version.sh" --created)}
go_image=${GO_IMAGE:-docker.io/library/golang:1.26-bookworm}
build_image=${BUILD_IMAGE:-docker.io/library/debian:bullseye-slim}
hostarch=$(host_arch)
IFS=, read -r -a platforms <<<"${PODMPI_PLATFORMS:-linux/$hostarch}"
IFS=, read -r -a mpi_platforms <<<"${PODMPI_MPI_PLATFORMS:-linux/$hostarch}"
# Outside the build context: a log written there would change the context
# and defeat the layer cache of the next image.
logdir=${PODMPI_BUILD_LOGS:-${TMPDIR:-/tmp}/podmpi-image-logs}
mkdir -p "$logdir"

# base_of IMAGE: the Debian base of an MPI image (its Dockerfile's
# BASE_IMAGE default).
base_of() {
	case "$1" in
	mpich) echo docker.io/library/debian:trixie-slim ;;
	*) echo docker.io/library/debian:bookworm-slim ;;
	esac
}
# The MPI images of an architecture copy the podmpi image of it.
mpis=()
for w in "${want[@]}"; do
	[[ "$w" == podmpi ]] || mpis+=("$w")
done
if [[ ${#mpis[@]} -gt 0 ]]; then
	for p in "${mpi_platforms[@]}"; do
		[[ " ${platforms[*]} " == *" $p "* ]] || platforms+=("$p")
		arch=${p##*/}
		for w in "${mpis[@]}"; do
			if [[ -z "$(image_unsupported "$w" "$arch")" ]]; then
				need_emulation "$arch" "building the $w image for $p (its RUN steps run $arch programs)"
			fi
		done
	done
fi

prebuilt=${PODMPI_PREBUILT:-}
if [[ -n "$prebuilt" ]]; then
	for b in "${podmpi_binaries[@]}"; do
		[[ -x "$prebuilt/$b" && ! -L "$prebuilt/$b" ]] ||
			die "PODMPI_PREBUILT=$prebuilt has no binary $b (make build BIN=$prebuilt makes ${podmpi_binaries[*]})"
	done
fi
# compiled: whether any podmpi image compiles in the build stage.
compiled=0
for p in "${platforms[@]}"; do
	[[ -n "$prebuilt" && "$p" == "linux/$hostarch" ]] || compiled=1
done

# Bases of the images asked for (FROM lines after ARG defaults).
if [[ $compiled -eq 1 ]]; then
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
for w in "${mpis[@]}"; do
	for p in "${mpi_platforms[@]}"; do
		[[ -n "$(image_unsupported "$w" "${p##*/}")" ]] || bases+=("$(base_of "$w") ${p##*/}")
	done
done
mapfile -t bases < <(printf '%s\n' "${bases[@]}" | sort -u | sed '/^$/d')
base_pids=()
for b in "${bases[@]}"; do
	# shellcheck disable=SC2086 # "NAME ARCH"
	if [[ "${PODMPI_PARALLEL:-0}" == 1 ]]; then
		# Each stand-in is a debootstrap: network and dpkg, side by side
		# with each other and with the podmpi image's build (waited for
		# before the MPI images).
		ensure_base $b &
		base_pids+=($!)
	else
		ensure_base $b
	fi
done

common_args=(--network=host "${ULIMITS[@]}"
	--build-arg GO_IMAGE="$go_image" --build-arg BUILD_IMAGE="$build_image"
	--build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg CREATED="$created")

# The podmpi image's build stage: this machine's Go module cache, filled
# here first (podman build volumes; not committed to any layer), so that
# its "go mod download" fetches nothing; with PODMPI_GO_CACHE=host also
# this machine's Go build cache, so that it compiles only what "make build"
# has not: the binaries are the same (-trimpath), the build takes seconds
# instead of minutes when the Go in the build image is this machine's
# (images/test.sh sets it).
go_cache_args=()
if [[ $compiled -eq 1 ]]; then
	if [[ "${ENGINE[0]}" != podman ]]; then
		note "${ENGINE[0]} build takes no volumes: the podmpi image's build stage downloads Go modules itself (from inside its container)"
	elif ! gomodcache=$(go env GOMODCACHE 2>/dev/null) || [[ -z "$gomodcache" ]]; then
		note "no go command here: the podmpi image's build stage downloads Go modules itself (from inside its container)"
	elif ! (cd "$root" && GOFLAGS=-mod=mod go mod download) >"$logdir/go-mod-download.log" 2>&1; then
		tail -5 "$logdir/go-mod-download.log" >&2
		note "go mod download failed here (above; log $logdir/go-mod-download.log): the podmpi image's build stage tries from inside its container"
	else
		mkdir -p "$gomodcache"
		go_cache_args=(-v "$gomodcache:/go/pkg/mod:z")
		if [[ "${PODMPI_GO_CACHE:-}" == host ]]; then
			gocache=$(go env GOCACHE)
			mkdir -p "$gocache"
			go_cache_args+=(-v "$gocache:/root/.cache/go-build:z")
		fi
	fi
fi

# The Intel MPI image's wheels, as scripts/intelmpi.sh caches them (the
# versions are the Dockerfile's), mounted read-only for its RUN steps
# (podman build volumes; nothing of them is committed to a layer).
intelmpi_wheels_args=()
intelmpi_hint=
if [[ " ${want[*]} " == *" intelmpi "* ]]; then
	intelmpi_hint="its pip reached for PyPI from inside the build container (no wheels fetched on this machine; see the line about them above): behind a TLS-inspecting proxy the container does not trust the proxy's CA; fetch them here with scripts/intelmpi.sh --wheels, which uses this machine's trust"
	if [[ "${ENGINE[0]}" != podman ]]; then
		note "${ENGINE[0]} build takes no volumes: the Intel MPI image's pip downloads its wheels from inside its container"
	else
		wheels=${PODMPI_INTELMPI_WHEELS:-}
		if [[ -z "$wheels" ]]; then
			if out=$("$root/scripts/intelmpi.sh" --wheels 2>&1); then
				wheels=$(tail -1 <<<"$out")
			else
				note "Intel MPI's wheels could not be fetched here: $(tail -1 <<<"$out")"
			fi
		fi
		if [[ -n "$wheels" && -d "$wheels" ]]; then
			intelmpi_wheels_args=(-v "$wheels:/wheels:ro,z")
			intelmpi_hint=
		else
			note "no Intel MPI wheels${wheels:+ in $wheels}: its pip downloads them from PyPI inside the build container"
		fi
	fi
fi

# The Horovod wheel, compiled here (once, cached) unless cached: without
# it the Horovod image compiles Horovod itself, from PyPI inside its
# container.
hvd_args=()
if [[ " ${want[*]} " == *" horovod "* ]]; then
	hvd_log=$logdir/horovod-wheel.log
	hvd_start=$(date +%s)
	if "$root/scripts/horovod-wheel.sh" >"$hvd_log" 2>&1; then
		note "horovod wheel ready in $(($(date +%s) - hvd_start)) s ($(tail -1 "$hvd_log"))"
	else
		tail -5 "$hvd_log" >&2
		note "no Horovod wheel compiled here (above; log $hvd_log): the Horovod image compiles it from PyPI inside its container"
	fi
	hvd_wheels=${PODMPI_HOROVOD_CACHE:-/var/cache/podmpi/horovod}/wheels
	if [[ -d "$hvd_wheels" ]]; then
		# The wheels scripts/horovod-wheel.sh compiled (horovod.Dockerfile's
		# horovod-wheels stage): the image's build installs the one of its key.
		hvd_args=(--build-context horovod-wheels="$hvd_wheels")
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
	if [[ "$what" == */intelmpi:* && -n "$intelmpi_hint" ]]; then
		note "  likely cause: $intelmpi_hint"
	fi
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

# The podmpi image, for every platform asked for (and every platform of
# the MPI images).
name="$prefix/podmpi"
declare -A podmpi_refs=()
# pids: the side-by-side builds (PODMPI_PARALLEL=1), keyed IMAGE-ARCH.
declare -A pids=()
for p in "${platforms[@]}"; do
	arch=${p##*/}
	tags=(-t "$name:$tag-$arch")
	if [[ "$arch" == "$hostarch" ]]; then
		tags+=(-t "$name:$tag" -t "$name:latest")
	fi
	args=("$name:$tag-$arch ($p)" "$here/podmpi.Dockerfile" "$logdir/podmpi-$arch.log"
		--platform "$p" --build-arg BUILDPLATFORM="linux/$hostarch" "${go_cache_args[@]}" "${tags[@]}")
	# BUILDPLATFORM explicitly: podman 4.3 leaves it unset, and the build
	# stage would then run (emulated) on the target platform.
	if [[ -n "$prebuilt" && "$arch" == "$hostarch" ]]; then
		build_prebuilt "$name:$tag-$arch" "$logdir/podmpi-$arch.log" "${tags[@]}" || continue
	elif [[ "${PODMPI_PARALLEL:-0}" == 1 && " ${mpi_platforms[*]} " != *" $p "* ]]; then
		# No MPI image here needs this one (make image-test's arm64
		# image): its compile, CPU-bound, runs beside the MPI images'
		# builds, which wait mostly on apt.
		build_one "${args[@]}" &
		pids[podmpi-$arch]=$!
		continue
	elif ! build_one "${args[@]}"; then
		continue
	fi
	built+=("$name:$tag-$arch")
	podmpi_refs[$arch]=$(local_ref "$name:$tag-$arch")
done
[[ $((${#podmpi_refs[@]} + ${#pids[@]})) -eq ${#platforms[@]} ]] || failed+=(podmpi)

# The MPI images, from the podmpi image of their platform (side by side
# with PODMPI_PARALLEL=1: each waits mostly on apt, not on the CPU).
for p in "${base_pids[@]}"; do
	wait "$p" || die "a base image could not be had (see above)"
done
for w in "${mpis[@]}"; do
	name="$prefix/$w"
	for p in "${mpi_platforms[@]}"; do
		arch=${p##*/}
		if why=$(image_unsupported "$w" "$arch") && [[ -n "$why" ]]; then
			note "not building $name for $p: $why"
			continue
		fi
		if [[ -z "${podmpi_refs[$arch]:-}" ]]; then
			note "SKIPPED $name for $p: no podmpi image for $p (see the failure above)"
			failed+=("$w-$arch")
			continue
		fi
		args=("$name:$tag-$arch ($p)" "$here/$w.Dockerfile" "$logdir/$w-$arch.log" --platform "$p"
			--build-arg PODMPI_IMAGE="${podmpi_refs[$arch]}" --build-arg BASE_IMAGE="$(base_ref "$(base_of "$w")" "$arch")"
			-t "$name:$tag-$arch")
		if [[ "$arch" == "$hostarch" ]]; then
			args+=(-t "$name:$tag" -t "$name:latest")
		fi
		[[ "$w" == intelmpi ]] && args+=("${intelmpi_wheels_args[@]}")
		[[ "$w" == horovod ]] && args+=("${hvd_args[@]}")
		if [[ "${PODMPI_PARALLEL:-0}" == 1 ]]; then
			build_one "${args[@]}" &
			pids[$w-$arch]=$!
		elif build_one "${args[@]}"; then
			built+=("$name:$tag-$arch")
		else
			failed+=("$w-$arch")
		fi
	done
done
for k in "${!pids[@]}"; do
	if wait "${pids[$k]}"; then
		built+=("$prefix/${k%-*}:$tag-${k##*-}")
	else
		failed+=("$k")
	fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
	die "images that did not build: ${failed[*]}"
fi
note "images: ${built[*]}"
