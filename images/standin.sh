# shellcheck shell=bash
# Base images for machines that reach Debian's mirror but no container
# registry (sourced by build.sh after lib.sh).
#
# ensure_base NAME [ARCH] makes NAME available locally for ARCH (default
# this machine's): already present, else pulled, else (PODMPI_STANDIN !=
# never) built here as a stand-in tagged with NAME so that the Dockerfiles'
# FROM lines work unchanged:
#   debian:<suite>-slim     debootstrap --variant=minbase <suite>, imported
#                           (trixie for the MPICH image, bookworm for the
#                           other MPI images, bullseye for the build stage
#                           of the podmpi image)
#   golang:<ver>-bookworm   the stand-in Debian + gcc/libc6-dev + this host's Go
#                           toolchain ($(go env GOROOT)), which must be <ver>,
#                           and this host's CA bundle
# A local store holds one image per name, so the base of another
# architecture is kept under another name, base_ref NAME ARCH
# (localhost/podmpi-base/debian:bookworm-slim-arm64): pulled for that
# platform and tagged so, or debootstrapped for that architecture (its
# second stage runs under qemu-user-static's binfmt_misc emulation). The
# build then passes it as BASE_IMAGE.
# A stand-in is labelled io.podmpi.standin=true so that nobody mistakes it for
# the real image. Needs root and debootstrap for the Debian one.
#
#   PODMPI_STANDIN   auto (default): pull first, stand-in when the pull fails;
#                    always: never pull; never: fail when the pull fails
#   PODMPI_MIRROR    Debian mirror for debootstrap (http://deb.debian.org/debian)

# base_ref NAME ARCH prints the local name of base image NAME for ARCH:
# NAME itself for this machine's architecture.
base_ref() {
	if [[ -z "${2:-}" || "$2" == "$(host_arch)" ]]; then
		echo "$1"
	else
		echo "localhost/podmpi-base/${1##*/}-$2"
	fi
}

standin_debian() {
	local name=$1 arch=${2:-$(host_arch)} suite work ref
	ref=$(base_ref "$name" "$arch")
	suite=${name##*debian:}
	suite=${suite%-slim}
	command -v debootstrap >/dev/null 2>&1 || die "building a stand-in for $name needs debootstrap (apt-get install -y debootstrap)"
	[[ $EUID -eq 0 ]] || die "building a stand-in for $name needs root (debootstrap)"
	work=$(mktemp -d /var/tmp/podmpi-standin.XXXXXX)
	# shellcheck disable=SC2064 # expand now: the path is fixed
	trap "rm -rf '$work'" RETURN
	if [[ "$arch" != "$(host_arch)" ]]; then
		need_emulation "$arch" "the stand-in $ref (debootstrap's second stage runs $arch programs)"
	fi
	note "stand-in $ref: debootstrap --variant=minbase --arch=$arch $suite (about 30 s; several minutes under emulation)"
	debootstrap --variant=minbase --arch="$arch" "$suite" "$work/rootfs" "${PODMPI_MIRROR:-http://deb.debian.org/debian}" >"$work/debootstrap.log" 2>&1 ||
		{ tail -20 "$work/debootstrap.log" >&2; die "debootstrap --arch=$arch $suite failed (log above)"; }
	# Same apt sources and apt settings as the official slim image.
	rm -f "$work/rootfs/etc/apt/sources.list"
	cat >"$work/rootfs/etc/apt/sources.list.d/debian.sources" <<EOF2
Types: deb
URIs: http://deb.debian.org/debian
Suites: $suite $suite-updates
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg

Types: deb
URIs: http://deb.debian.org/debian-security
Suites: $suite-security
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF2
	printf 'APT::Install-Recommends "false";\n' >"$work/rootfs/etc/apt/apt.conf.d/99podmpi-standin"
	rm -rf "$work/rootfs/var/cache/apt/archives/"*.deb "$work/rootfs/var/lib/apt/lists/"*
	tar -C "$work/rootfs" -c . | "${ENGINE[@]}" import --arch "$arch" \
		--change 'CMD ["bash"]' \
		--change 'LABEL io.podmpi.standin=true' \
		--change 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
		- "$ref" >/dev/null || die "importing the $suite rootfs ($arch) as $ref failed"
}

standin_golang() {
	local name=$1 want goroot have work ca=/etc/ssl/certs/ca-certificates.crt
	want=${name#*golang:}
	want=${want%%-*}
	command -v go >/dev/null 2>&1 || die "building a stand-in for $name needs Go $want on this host"
	goroot=$(go env GOROOT)
	have=$(go env GOVERSION)
	[[ "$have" == "go$want" || "$have" == go$want.* ]] || die "stand-in $name: host Go is $have, want go$want (set GO_IMAGE to match)"
	[[ -r "$ca" ]] || die "stand-in $name: no CA bundle at $ca"
	ensure_base docker.io/library/debian:bookworm-slim
	work=$(mktemp -d /var/tmp/podmpi-standin.XXXXXX)
	# shellcheck disable=SC2064
	trap "rm -rf '$work'" RETURN
	cp -a "$goroot" "$work/go"
	# The host's CA bundle: "go mod download" in the build stage must trust
	# what this host trusts (a TLS-inspecting proxy in front of the module
	# proxy, for one). A real golang image trusts the public CAs only.
	cp "$ca" "$work/host-ca-certificates.crt"
	cat >"$work/Dockerfile" <<'EOF2'
FROM docker.io/library/debian:bookworm-slim
RUN apt-get update && apt-get install -y --no-install-recommends gcc libc6-dev git ca-certificates \
    && rm -rf /var/lib/apt/lists/*
COPY go /usr/local/go
COPY host-ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV GOPATH=/go PATH=/go/bin:/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LABEL io.podmpi.standin=true io.podmpi.standin.host-ca=true
WORKDIR /go
EOF2
	note "stand-in $name: bookworm + gcc + host Go $have from $goroot + host CA bundle"
	"${ENGINE[@]}" build --network=host "${ULIMITS[@]}" -t "$name" -f "$work/Dockerfile" "$work" >"$work/build.log" 2>&1 ||
		{ tail -30 "$work/build.log" >&2; die "building the stand-in $name failed (log above)"; }
}

# ensure_base NAME [ARCH]: see the file comment. NAME is fully qualified
# (docker.io/library/...), as podman stores it.
ensure_base() {
	local name=$1 arch=${2:-$(host_arch)} ref
	ref=$(base_ref "$name" "$arch")
	image_exists "$ref" && return 0
	if [[ "${PODMPI_STANDIN:-auto}" != always ]]; then
		if [[ "$arch" == "$(host_arch)" ]]; then
			if timeout 300 "${ENGINE[@]}" pull -q "$name" >/dev/null 2>&1; then
				return 0
			fi
		elif timeout 300 "${ENGINE[@]}" pull -q --platform "linux/$arch" "$name" >/dev/null 2>&1; then
			# Under its own name: the store keeps one image per name, and
			# NAME is this machine's architecture's.
			"${ENGINE[@]}" tag "$name" "$ref" && "${ENGINE[@]}" rmi "$name" >/dev/null 2>&1
			image_exists "$ref" && return 0
		fi
		[[ "${PODMPI_STANDIN:-auto}" == never ]] && die "cannot pull $name for linux/$arch and PODMPI_STANDIN=never"
		note "cannot pull $name for linux/$arch (no registry reachable?): building a local stand-in"
	fi
	case "$name" in
	*/debian:trixie-slim | debian:trixie-slim | */debian:bookworm-slim | debian:bookworm-slim | */debian:bullseye-slim | debian:bullseye-slim) standin_debian "$name" "$arch" ;;
	*/golang:*-bookworm | golang:*-bookworm)
		[[ "$arch" == "$(host_arch)" ]] || die "no stand-in of $name for $arch: the Go stage runs on this machine's architecture"
		standin_golang "$name"
		;;
	*) die "cannot pull $name and there is no stand-in recipe for it" ;;
	esac
}
