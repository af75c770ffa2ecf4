#!/usr/bin/env bash
# Builds podmpi's runtime images with podman or docker.
#
#   images/build.sh [openmpi] [mpich] [intelmpi] [horovod]    (default: all four)
#
# Each image is tagged <prefix>/<mpi>:<tag> and <prefix>/<mpi>:latest, with
#   PODMPI_IMAGE_PREFIX   default podmpi (podman stores it as localhost/podmpi)
#   PODMPI_TAG            default: git describe of the work tree, else "devel"
# Builds use the host network (RUN apt-get, go mod download). Base images that
# cannot be pulled are replaced by local stand-ins (see standin.sh) for Debian
# and Go; the Intel MPI image needs Intel's apt repository and the Horovod
# image needs PyPI and download.pytorch.org, so they build only where those
# are reachable. A failed image does not stop the others; the exit status is
# non-zero when any failed, and the summary names them.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=images/lib.sh
. "$here/lib.sh"
# shellcheck source=images/standin.sh
. "$here/standin.sh"

all=(openmpi mpich intelmpi horovod)
want=("$@")
[[ ${#want[@]} -gt 0 ]] || want=("${all[@]}")
for w in "${want[@]}"; do
	[[ -f "$here/$w.Dockerfile" ]] || die "unknown image $w (have: ${all[*]})"
done

engine_init
prefix=${PODMPI_IMAGE_PREFIX:-podmpi}
version=$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo devel)
revision=$(git -C "$root" rev-parse HEAD 2>/dev/null || echo unknown)
tag=${PODMPI_TAG:-$version}
created=$(date -u +%Y-%m-%dT%H:%M:%SZ)
go_image=${GO_IMAGE:-docker.io/library/golang:1.26-bookworm}
# Outside the build context: a log written there would change the context
# and defeat the layer cache of the next image.
logdir=${PODMPI_BUILD_LOGS:-${TMPDIR:-/tmp}/podmpi-image-logs}
mkdir -p "$logdir"

# Bases of the images asked for (FROM lines after ARG defaults).
ensure_base "$go_image"
for w in "${want[@]}"; do
	case "$w" in
	openmpi | mpich | horovod) ensure_base docker.io/library/debian:bookworm-slim ;;
	esac
done

failed=()
for w in "${want[@]}"; do
	name="$prefix/$w"
	log="$logdir/$w.log"
	note "building $name:$tag with ${ENGINE[0]} (log: $log)"
	start=$(date +%s)
	if "${ENGINE[@]}" build --network=host "${ULIMITS[@]}" \
		--build-arg GO_IMAGE="$go_image" \
		--build-arg VERSION="$version" --build-arg REVISION="$revision" --build-arg CREATED="$created" \
		-f "$here/$w.Dockerfile" -t "$name:$tag" -t "$name:latest" "$root" >"$log" 2>&1; then
		note "built $name:$tag in $(($(date +%s) - start)) s"
	else
		tail -25 "$log" >&2
		note "FAILED $name after $(($(date +%s) - start)) s (last lines above, full log: $log)"
		failed+=("$w")
	fi
done
if [[ ${#failed[@]} -gt 0 ]]; then
	die "images that did not build: ${failed[*]}"
fi
note "images: $(printf "$prefix/%s:$tag " "${want[@]}")"
