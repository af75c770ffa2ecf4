#!/usr/bin/env bash
# Removes what earlier builds of podmpi's images left in the local store:
# every <prefix>/<image> tag but this checkout's (and latest), and the build
# stages no tag holds any more. Each build of a new commit adds about 5 GB
# (three images and their build stages); a machine that builds every commit
# fills its disk, and the test cluster's kubelet then taints its node
# disk-pressure, leaving every pod Pending. Base images (Debian, Go) and
# images of other names are kept.
#
#   images/prune.sh            PODMPI_IMAGE_PREFIX and PODMPI_TAG as build.sh
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=images/lib.sh
. "$here/lib.sh"

engine_init
prefix=${PODMPI_IMAGE_PREFIX:-podmpi}
tag=${PODMPI_TAG:-$("$root/scripts/version.sh")}
# podman names local images localhost/<prefix>/...; docker keeps <prefix>/...
keep="^(localhost/)?$prefix/[^:]+:($tag|latest)(-[a-z0-9]+)?\$"
mapfile -t old < <("${ENGINE[@]}" images --format '{{.Repository}}:{{.Tag}}' |
	grep -E "^(localhost/)?$prefix/[^:]+:" | grep -Ev "$keep" || true)
if [[ ${#old[@]} -gt 0 ]]; then
	note "removing ${#old[@]} superseded image tags (keeping :$tag and :latest)"
	# An image a container still uses stays (and says so).
	"${ENGINE[@]}" rmi "${old[@]}" >/dev/null || note "some were kept: in use by a container"
fi
"${ENGINE[@]}" image prune -f >/dev/null
note "left: $("${ENGINE[@]}" images -q | sort -u | wc -l) images"
