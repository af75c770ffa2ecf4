#!/usr/bin/env bash
# /opt/podmpi of the binaries-only image, from a folder laid out as make
# build lays out ./bin (scripts/build.sh). The build stage of
# podmpi.Dockerfile and images/build.sh with PODMPI_PREBUILT both make it
# here, so that the image holds the same whichever way it was built.
#
#   images/layout.sh BIN OPT
#
#   OPT/bin     the binaries (lib.sh's podmpi_binaries) and the links
#               `launcher names` lists, copied from BIN, and nothing else
#               (a make build folder may hold other tools, such as
#               bin/podmpi-cluster); when BIN is OPT/bin it is left as it is
#   OPT/libexec the real worker-agent (lib.sh's podmpi_libexec), from
#               BIN/../libexec, where make build puts it: bin/worker-agent
#               is a link to the launcher, which checks the image and runs it
#   OPT/sbom    "go version -m" of each binary, and the SPDX 2.3 SBOM of all
#               of them (images/sbom)
#   OPT/LICENSE, OPT/NOTICE
#
# Environment: GO (default go), CREATED and VERSION (the SBOM's creation time
# and version; default now and devel).
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)
# shellcheck source=images/lib.sh
. "$here/lib.sh"

[[ $# -eq 2 ]] || die "usage: images/layout.sh BIN OPT"
bin=$(cd "$1" && pwd) || die "images/layout.sh: no folder $1"
libexec=$(cd "$bin/../libexec" 2>/dev/null && pwd) ||
	die "$bin/../libexec: no folder: $bin is not laid out as make build lays it out (run make build BIN=$bin)"
mkdir -p "$2/bin" "$2/libexec" "$2/sbom"
opt=$(cd "$2" && pwd)
go=${GO:-go}
created=${CREATED:-$(date -u +%Y-%m-%dT%H:%M:%SZ)}
version=${VERSION:-devel}

for b in "${podmpi_binaries[@]/#/$bin/}" "${podmpi_libexec[@]/#/$libexec/}"; do
	# An older make build left podmpi-rsh as a link to the launcher, and
	# worker-agent in bin/.
	[[ -f "$b" && ! -L "$b" && -x "$b" ]] ||
		die "$b is not an executable file: $bin is not laid out as make build lays it out (run make build BIN=$bin)"
done
if [[ "$bin" != "$opt/bin" ]]; then
	for b in "${podmpi_binaries[@]}"; do
		cp "$bin/$b" "$opt/bin/$b"
	done
	for b in "${podmpi_libexec[@]}"; do
		cp "$libexec/$b" "$opt/libexec/$b"
	done
	# The links, as scripts/build.sh makes them (the launcher keeps the one
	# list): this machine's launcher, since only a host build is copied.
	links=$("$opt/bin/launcher" names) || die "$opt/bin/launcher names: the launcher does not run on this machine"
	while read -r n target; do
		[[ -n "$n" ]] || continue
		ln -sfn "$target" "$opt/bin/$n"
	done <<<"$links"
fi
paths=()
for b in "${podmpi_binaries[@]/#/bin/}" "${podmpi_libexec[@]/#/libexec/}"; do
	(cd "$opt/$(dirname "$b")" && "$go" version -m "$(basename "$b")") >"$opt/sbom/$(basename "$b").go-version-m.txt"
	paths+=("$opt/$b")
done
(cd "$root" && "$go" run ./images/sbom -created "$created" -version "$version" -o "$opt/sbom/podmpi.spdx.json" "${paths[@]}")
cp "$root/LICENSE" "$root/NOTICE" "$opt/"
chmod -R a+rX,go-w "$opt"
