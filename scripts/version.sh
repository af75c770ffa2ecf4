#!/usr/bin/env bash
# The version a build of this work tree is stamped and tagged with, and the
# check of a release version: the one home of both.
#
#   scripts/version.sh              prints the tree's version: `git describe
#                                   --tags --always --dirty` when that is a
#                                   release version (a tag vX.Y.Z, or
#                                   vX.Y.Z-N-gHASH after it), else
#                                   v0.0.0-<describe> (v0.0.0-3479b6c,
#                                   v0.0.0-3479b6c-dirty); v0.0.0-devel
#                                   outside a git checkout
#   scripts/version.sh --check V    exit 0 when V is a release version:
#                                   vMAJOR.MINOR.PATCH with an optional
#                                   -PRERELEASE of letters, digits, dots and
#                                   dashes (what an image tag and SemVer both
#                                   take), else exit 1 with one line saying why
#   scripts/version.sh --created    the tree's last commit time, UTC, RFC 3339
#                                   (SOURCE_DATE_EPOCH when set): the images'
#                                   and SBOMs' creation time, fixed per commit
#                                   so that building the same tree again gives
#                                   the same layers (the layer cache holds)
#
# images/build.sh, images/test.sh, images/prune.sh, scripts/release.sh and
# the test cluster (test/cluster) all ask here.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
release_re='^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(-[0-9A-Za-z][0-9A-Za-z.-]*)?$'

case "${1:-}" in
--check)
	v=${2:-}
	if [[ "$v" =~ $release_re ]] && [[ ${#v} -le 128 ]]; then
		exit 0
	fi
	echo "version '$v' is not a release version: want vMAJOR.MINOR.PATCH or vMAJOR.MINOR.PATCH-PRERELEASE (v0.2.0, v0.2.0-rc.1), at most 128 characters"
	exit 1
	;;
--created)
	if [[ -n "${SOURCE_DATE_EPOCH:-}" ]]; then
		date -u -d "@$SOURCE_DATE_EPOCH" +%Y-%m-%dT%H:%M:%SZ
	elif t=$(git -C "$root" log -1 --format=%ct 2>/dev/null) && [[ -n "$t" ]]; then
		date -u -d "@$t" +%Y-%m-%dT%H:%M:%SZ
	else
		date -u +%Y-%m-%dT%H:%M:%SZ
	fi
	exit 0
	;;
"") ;;
*)
	echo "usage: scripts/version.sh [--check VERSION | --created]" >&2
	exit 64
	;;
esac

d=$(git -C "$root" describe --tags --always --dirty 2>/dev/null || echo devel)
if [[ "$d" =~ $release_re ]]; then
	echo "$d"
else
	echo "v0.0.0-$d"
fi
