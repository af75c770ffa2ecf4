#!/usr/bin/env bash
# make release: one release of podmpi, pushed to a registry and written to
# dist/.
#
#   make release VERSION=v0.2.0 REGISTRY=registry.example.com/podmpi
#   make release VERSION=v0.2.0 REGISTRY=10.0.0.5:5000/podmpi TLS_VERIFY=false   (plain http)
#   make release ... ALLOW_DIRTY=1                                              (uncommitted changes)
#   scripts/release.sh [build] [push] [sbom] [dist]     (default: all four, in this order)
#
#   build  the images, stamped VERSION (images/build.sh: the binaries-only
#          image for every platform, cross-compiled; the MPI images for
#          every platform each supports, another architecture's under
#          emulation). An image whose every platform podman already has
#          under VERSION, with VERSION and this commit in its labels, is not
#          built again while the tree is clean (make image-test and make
#          cluster-up build the same tags); otherwise the layer cache makes
#          a rebuild of unchanged steps quick.
#   push   each image's per-architecture images to
#          REGISTRY/<image>:VERSION-<arch>, then one manifest list of them,
#          REGISTRY/<image>:VERSION (podman manifest create, add, push
#          --all), read back from the registry to check its platforms
#   sbom   the SPDX 2.3 SBOM of the podmpi binaries of each architecture
#          (/opt/podmpi/sbom/podmpi.spdx.json of that architecture's podmpi
#          image, which every image carries) attached to each
#          per-architecture image as an OCI artifact that refers to it
#          (oras attach, artifact type application/spdx+json; oras is built
#          from the Go module proxy at the version test/cluster/versions.txt
#          pins, once). The registry's referrers API answers where it has
#          one; elsewhere oras keeps the referrers in the tag
#          sha256-<digest of the image> (OCI 1.1's fallback), as for the
#          CNCF registry 3.1. Fetch it with
#            oras discover --platform linux/amd64 --artifact-type application/spdx+json REGISTRY/openmpi:VERSION
#            oras pull -o . REGISTRY/openmpi@<the artifact's digest>
#          Checked by fetching it back; attached once per SBOM (its SHA-256
#          is an annotation), so a release run again adds none.
#   dist   dist/podmpi-VERSION-linux-<arch>.tar.gz (the /opt/podmpi tree of
#          that architecture's podmpi image, as podmpi/: tar -C /opt -xzf
#          gives /opt/podmpi), dist/podmpi-VERSION-linux-<arch>.spdx.json,
#          dist/images-VERSION.txt (every image as REGISTRY/<image>:VERSION@
#          <digest of its manifest list>; with push only) and
#          dist/SHA256SUMS of them (sha256sum -c SHA256SUMS checks). The
#          tarballs are reproducible: sorted, owner 0, the commit's time.
#
# Environment (make passes its variables of the same names):
#   VERSION    vMAJOR.MINOR.PATCH[-PRERELEASE] (scripts/version.sh --check);
#              scripts/version.sh prints the tree's
#   REGISTRY   host[:port]/path the images go to (push, sbom)
#   TLS_VERIFY false: the registry is plain http or has a certificate this
#              machine does not trust (default true)
#   ALLOW_DIRTY 1: release a tree with uncommitted changes (refused
#              otherwise: a release is a commit)
#   PODMPI_RELEASE_PLATFORMS  default linux/amd64,linux/arm64
#   PODMPI_RELEASE_IMAGES     default "podmpi openmpi mpich intelmpi horovod"
#   PODMPI_RELEASE_DIST       default dist (in the repository)
#   PODMPI_RELEASE_COMPRESSION  the layers' compression: gzip (default: every
#                             client reads it) or zstd (containerd 1.5+, podman
#                             3.x+; compresses about 4 times faster here and
#                             smaller: the test cluster pushes so)
#   PODMPI_IMAGE_PREFIX       the local images' prefix (default podmpi), as
#                             images/build.sh
# Needs podman (manifest lists), Go (oras) and, for another architecture's
# MPI images, qemu-user-static (images/build.sh says how).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
# shellcheck source=images/lib.sh
. "$root/images/lib.sh"
cd "$root"

steps=("$@")
[[ ${#steps[@]} -gt 0 ]] || steps=(build push sbom dist)
for s in "${steps[@]}"; do
	case "$s" in
	build | push | sbom | dist) ;;
	*) die "release: unknown step '$s' (build, push, sbom, dist)" ;;
	esac
done
has_step() { [[ " ${steps[*]} " == *" $1 "* ]]; }

version=${VERSION:-}
if [[ -z "$version" || "${VERSION_ORIGIN:-}" == file ]]; then
	die "release: no VERSION given: make release VERSION=vX.Y.Z REGISTRY=host[:port]/prefix (this tree's would be $("$root/scripts/version.sh"))"
fi
why=$("$root/scripts/version.sh" --check "$version") || die "release: VERSION: $why"
registry=${REGISTRY:-}
registry=${registry%/}
if has_step push || has_step sbom; then
	[[ -n "$registry" ]] || die "release: no REGISTRY given: make release VERSION=$version REGISTRY=host[:port]/prefix (e.g. registry.example.com/podmpi; the test cluster's is printed by make cluster-up)"
	[[ "$registry" =~ ^[a-z0-9.-]+(:[0-9]+)?(/[a-z0-9._-]+)+$ ]] ||
		die "release: REGISTRY=$registry: want host[:port]/path in lower case (registry.example.com/podmpi, 10.0.0.5:5000/podmpi)"
fi
tls_verify=${TLS_VERIFY:-true}
[[ "$tls_verify" == true || "$tls_verify" == false ]] || die "release: TLS_VERIFY=$tls_verify: want true or false"
if [[ -n "$(git status --porcelain 2>/dev/null)" ]]; then
	if [[ "${ALLOW_DIRTY:-}" != 1 ]]; then
		git status --short | head -20 >&2
		die "release: the work tree has uncommitted changes (above): commit them, or release it as it is with ALLOW_DIRTY=1"
	fi
	dirty=1
	note "releasing a tree with uncommitted changes (ALLOW_DIRTY=1)"
else
	dirty=0
fi
revision=$(git rev-parse HEAD)
IFS=, read -r -a platforms <<<"${PODMPI_RELEASE_PLATFORMS:-linux/amd64,linux/arm64}"
read -r -a images <<<"${PODMPI_RELEASE_IMAGES:-podmpi openmpi mpich intelmpi horovod}"
prefix=${PODMPI_IMAGE_PREFIX:-podmpi}
dist=${PODMPI_RELEASE_DIST:-$root/dist}
for tool in git curl go; do
	command -v "$tool" >/dev/null || die "release: no $tool here (apt-get install -y git curl; Go from https://go.dev/dl/)"
done
PODMPI_ENGINE=podman
engine_init
export PODMPI_PODMAN_FLAGS PODMPI_ULIMITS
tls=(--tls-verify="$tls_verify")
compression=${PODMPI_RELEASE_COMPRESSION:-gzip}
[[ "$compression" == gzip || "$compression" == zstd ]] || die "release: PODMPI_RELEASE_COMPRESSION=$compression: want gzip or zstd"
work=$(mktemp -d "${TMPDIR:-/tmp}/podmpi-release.XXXXXX")
trap 'rm -rf "$work"' EXIT
t0=$(date +%s)
since() { echo "$(($(date +%s) - $1)) s"; }

# arches IMAGE: the architectures of platforms IMAGE is released for.
arches() {
	local p
	for p in "${platforms[@]}"; do
		[[ -n "$(image_unsupported "$1" "${p##*/}")" ]] || echo "${p##*/}"
	done
}
local_image() { local_ref "$prefix/$1:$version-$2"; }
# current IMAGE ARCH: podman has it, built from this commit for VERSION.
current() {
	local got
	got=$("${ENGINE[@]}" image inspect --format '{{.Architecture}} {{index .Labels "org.opencontainers.image.version"}} {{index .Labels "org.opencontainers.image.revision"}}' "$(local_image "$1" "$2")" 2>/dev/null) || return 1
	[[ "$got" == "$2 $version $revision" ]]
}

if has_step build; then
	start=$(date +%s)
	todo=()
	for w in "${images[@]}"; do
		for a in $(arches "$w"); do
			if [[ $dirty -eq 1 ]] || ! current "$w" "$a"; then
				todo+=("$w")
				break
			fi
		done
	done
	if [[ ${#todo[@]} -eq 0 ]]; then
		note "build: podman has every image of $version from this commit ($(printf '%s ' "${images[@]}")for ${platforms[*]}): none built again"
	else
		note "build: ${todo[*]} for ${platforms[*]} (images/build.sh)"
		PODMPI_VERSION=$version PODMPI_TAG=$version PODMPI_PLATFORMS=$(
			IFS=,
			echo "${platforms[*]}"
		) PODMPI_MPI_PLATFORMS=$(
			IFS=,
			echo "${platforms[*]}"
		) PODMPI_GO_CACHE=${PODMPI_GO_CACHE:-host} PODMPI_PARALLEL=${PODMPI_PARALLEL:-1} \
			"$root/images/build.sh" "${todo[@]}"
	fi
	for w in "${images[@]}"; do
		for a in $(arches "$w"); do
			current "$w" "$a" || die "release: after the build podman has no $(local_image "$w" "$a") of $version from commit $revision"
		done
	done
	note "build: $(since "$start")"
fi

# registry_get PATH: GET PATH of the registry's API (an index or a
# manifest), over https, or http when TLS_VERIFY=false and https fails.
registry_get() {
	local host=${registry%%/*} accept out
	accept="application/vnd.oci.image.index.v1+json, application/vnd.oci.image.manifest.v1+json, application/vnd.docker.distribution.manifest.list.v2+json, application/vnd.docker.distribution.manifest.v2+json"
	if [[ "$tls_verify" == true ]]; then
		curl -fsS --max-time 30 -H "Accept: $accept" "https://$host$1"
	elif ! out=$(curl -kfsS --max-time 30 -H "Accept: $accept" "https://$host$1" 2>&1); then
		curl -fsS --max-time 30 -H "Accept: $accept" "http://$host$1"
	else
		echo "$out"
	fi
}

declare -A list_digest=()
if has_step push; then
	start=$(date +%s)
	for w in "${images[@]}"; do
		refs=()
		for a in $(arches "$w"); do
			s=$(date +%s)
			ref="$registry/$w:$version-$a"
			"${ENGINE[@]}" push -q "${tls[@]}" --compression-format "$compression" "$(local_image "$w" "$a")" "docker://$ref" >"$work/push.log" 2>&1 ||
				{ cat "$work/push.log" >&2; die "release: pushing $(local_image "$w" "$a") to $ref failed (above); is the registry up, and does it take plain http (TLS_VERIFY=false)?"; }
			note "pushed $ref in $(since "$s")"
			refs+=("$ref")
		done
		s=$(date +%s)
		list="$registry/$w:$version"
		# A list of the images in the registry, made, pushed and removed
		# here: podman 4.3's local lists of local images break "podman
		# images".
		"${ENGINE[@]}" manifest rm "$list" >/dev/null 2>&1 || true
		"${ENGINE[@]}" manifest create "$list" >/dev/null
		for ref in "${refs[@]}"; do
			"${ENGINE[@]}" manifest add "${tls[@]}" "$list" "docker://$ref" >/dev/null
		done
		if ! "${ENGINE[@]}" manifest push -q --all "${tls[@]}" --digestfile "$work/digest" "$list" "docker://$list" >"$work/push.log" 2>&1; then
			cat "$work/push.log" >&2
			"${ENGINE[@]}" manifest rm "$list" >/dev/null 2>&1 || true
			die "release: pushing the manifest list $list failed (above)"
		fi
		"${ENGINE[@]}" manifest rm "$list" >/dev/null
		list_digest[$w]=$(cat "$work/digest")
		# Read back: the list in the registry names every architecture.
		got=$(registry_get "/v2/${registry#*/}/$w/manifests/$version") ||
			die "release: reading $list back from the registry failed: $got"
		for a in $(arches "$w"); do
			grep -Eq "\"architecture\": ?\"$a\"" <<<"$got" || die "release: the manifest list $list in the registry has no $a image: $got"
		done
		note "pushed $list@${list_digest[$w]} ($(arches "$w" | xargs)) in $(since "$s")"
	done
	note "push: $(since "$start")"
fi

# opt_tree ARCH DIR: /opt/podmpi of that architecture's podmpi image, as
# DIR/podmpi.
opt_tree() {
	local c
	mkdir -p "$2"
	c=$("${ENGINE[@]}" create --arch "$1" "$(local_image podmpi "$1")" /opt/podmpi/bin/launcher version 2>"$work/create.log") ||
		{ cat "$work/create.log" >&2; die "release: no podmpi image $(local_image podmpi "$1") (run the build step)"; }
	if ! "${ENGINE[@]}" export "$c" | tar -x -C "$2" opt/podmpi; then
		"${ENGINE[@]}" rm "$c" >/dev/null
		die "release: could not copy /opt/podmpi out of $(local_image podmpi "$1")"
	fi
	"${ENGINE[@]}" rm "$c" >/dev/null
	mv "$2/opt/podmpi" "$2/podmpi"
	rmdir "$2/opt"
}

sbom_arches=()
for p in "${platforms[@]}"; do
	sbom_arches+=("${p##*/}")
done
if has_step sbom || has_step dist; then
	for a in "${sbom_arches[@]}"; do
		opt_tree "$a" "$work/tree-$a"
	done
fi

if has_step sbom; then
	start=$(date +%s)
	oras_version=$(awk '$1 == "oras" { print $2 }' "$root/test/cluster/versions.txt")
	[[ -n "$oras_version" ]] || die "release: no oras line in test/cluster/versions.txt"
	tools=${PODMPI_TOOLS_CACHE:-/var/cache/podmpi/tools}
	mkdir -p "$tools" 2>/dev/null && [[ -w "$tools" ]] || tools=${XDG_CACHE_HOME:-$HOME/.cache}/podmpi/tools
	oras=$tools/oras-$oras_version/oras
	if [[ ! -x "$oras" ]]; then
		s=$(date +%s)
		note "building oras $oras_version from the Go module proxy into $tools/oras-$oras_version (once)"
		mkdir -p "$tools/oras-$oras_version.tmp"
		GOBIN="$tools/oras-$oras_version.tmp" CGO_ENABLED=0 GOFLAGS=-mod=mod go install "oras.land/oras/cmd/oras@$oras_version" >"$work/oras.log" 2>&1 ||
			{ tail -20 "$work/oras.log" >&2; die "release: building oras $oras_version failed (above)"; }
		rm -rf "$tools/oras-$oras_version"
		mv "$tools/oras-$oras_version.tmp" "$tools/oras-$oras_version"
		note "built oras in $(since "$s")"
	fi
	oras_tls=()
	[[ "$tls_verify" == true ]] || oras_tls=(--plain-http)
	if [[ "$tls_verify" == false ]] && ! curl -fsS -o /dev/null "http://${registry%%/*}/v2/" 2>/dev/null; then
		# TLS_VERIFY=false with a registry that speaks https: a
		# certificate this machine does not trust.
		oras_tls=(--insecure)
	fi
	for w in "${images[@]}"; do
		for a in $(arches "$w"); do
			sbom=$work/tree-$a/podmpi/sbom/podmpi.spdx.json
			sum=$(sha256sum "$sbom" | cut -c1-64)
			ref="$registry/$w:$version-$a"
			digest=$("$oras" resolve "${oras_tls[@]}" "$ref") || die "release: $ref is not in the registry (run the push step)"
			subject="$registry/$w@$digest"
			found=$("$oras" discover "${oras_tls[@]}" --artifact-type application/spdx+json --format json "$subject") ||
				die "release: oras discover $subject failed: $found"
			if grep -q "\"io.podmpi.sbom.sha256\": \"$sum\"" <<<"$found"; then
				note "sbom: $ref has it already"
				continue
			fi
			cp "$sbom" "$work/podmpi.spdx.json"
			out=$(cd "$work" && "$oras" attach "${oras_tls[@]}" --format json --artifact-type application/spdx+json \
				--annotation "io.podmpi.sbom.sha256=$sum" --annotation "org.opencontainers.image.version=$version" \
				"$subject" podmpi.spdx.json:application/spdx+json) || die "release: oras attach to $subject failed: $out"
			artifact=$(sed -n 's/.*"digest": *"\(sha256:[0-9a-f]*\)".*/\1/p' <<<"$out" | head -1)
			# Fetched back from the registry, byte for byte.
			rm -rf "$work/pulled"
			"$oras" pull "${oras_tls[@]}" -o "$work/pulled" "$registry/$w@$artifact" >/dev/null ||
				die "release: the SBOM attached to $subject ($artifact) could not be pulled back"
			cmp -s "$sbom" "$work/pulled/podmpi.spdx.json" || die "release: the SBOM pulled back from $registry/$w@$artifact differs from the image's"
			note "sbom: attached to $ref as $registry/$w@$artifact"
		done
	done
	note "sbom: $(since "$start")"
fi

if has_step dist; then
	start=$(date +%s)
	mkdir -p "$dist"
	epoch=$(git log -1 --format=%ct)
	files=()
	for a in "${sbom_arches[@]}"; do
		base=podmpi-$version-linux-$a
		tar -C "$work/tree-$a" --sort=name --owner=0 --group=0 --numeric-owner --mtime="@$epoch" -c podmpi |
			gzip -n -9 >"$dist/$base.tar.gz"
		cp "$work/tree-$a/podmpi/sbom/podmpi.spdx.json" "$dist/$base.spdx.json"
		files+=("$base.tar.gz" "$base.spdx.json")
		# The stamp, as the binaries print it (this machine's architecture
		# runs them).
		if [[ "$a" == "$(host_arch)" ]]; then
			for cmd in "launcher version" "worker-agent version"; do
				# shellcheck disable=SC2086 # "program subcommand"
				got=$("$work/tree-$a/podmpi/bin/"$cmd 2>&1) || die "release: $base: $cmd failed: $got"
				[[ "$got" == *" $version ("* ]] || die "release: $base: '$cmd' says '$got', not $version"
			done
		fi
	done
	if [[ ${#list_digest[@]} -gt 0 ]]; then
		: >"$dist/images-$version.txt"
		for w in "${images[@]}"; do
			echo "$registry/$w:$version@${list_digest[$w]}" >>"$dist/images-$version.txt"
		done
		files+=("images-$version.txt")
	fi
	(cd "$dist" && sha256sum "${files[@]}" >SHA256SUMS && sha256sum -c --quiet SHA256SUMS)
	note "dist: $(printf '%s ' "${files[@]}")SHA256SUMS in $dist ($(since "$start"))"
fi
note "release $version: ${steps[*]} in $(since "$t0")"
