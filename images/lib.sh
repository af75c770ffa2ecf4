# shellcheck shell=bash
# Shared helpers of images/build.sh and images/test.sh (sourced, not run).
#
# Picks the container engine and the flags it needs on this kind of machine:
#   PODMPI_ENGINE        podman or docker (default: podman when installed, else docker)
#   PODMPI_PODMAN_FLAGS  global podman flags (default: --runtime runc
#                        --cgroup-manager=cgroupfs --events-backend=file, which
#                        hosts with hybrid cgroups and no systemd user session need;
#                        set to "" on a normal cgroup v2 host)
#   PODMPI_ULIMITS       --ulimit flags for builds and containers (default: this
#                        shell's hard nofile limit and nproc capped at 32768;
#                        podman asks for 1048576 open files otherwise, which a
#                        VM without CAP_SYS_RESOURCE refuses)

# The binaries of /opt/podmpi/bin, as scripts/build.sh (make build) makes
# them; every other name there is a link to one of them (worker-agent to
# the launcher, which runs the real one of podmpi_libexec).
podmpi_binaries=(launcher podmpi-rsh)
# The binaries of /opt/podmpi/libexec, make build's ../libexec next to bin.
podmpi_libexec=(worker-agent)

# image_unsupported IMAGE ARCH prints why IMAGE is not built for ARCH, and
# nothing when it is (images/build.sh skips it with that line;
# scripts/release.sh releases it for the others).
image_unsupported() {
	case "$1/$2" in
	intelmpi/amd64 | horovod/amd64) ;;
	intelmpi/*) echo "Intel MPI's wheels on PyPI (impi-rt) are built for x86_64 only" ;;
	horovod/*) echo "PyPI has Horovod as source only, and its compile (about 8 CPU-minutes natively) would take hours under emulation" ;;
	esac
}

die() { echo "error: $*" >&2; exit 1; }
note() { echo "== $*" >&2; }

engine_init() {
	if [[ -z "${PODMPI_ENGINE:-}" ]]; then
		if command -v podman >/dev/null 2>&1; then
			PODMPI_ENGINE=podman
		elif command -v docker >/dev/null 2>&1; then
			PODMPI_ENGINE=docker
		else
			die "neither podman nor docker is installed (apt-get install -y podman runc)"
		fi
	fi
	case "$PODMPI_ENGINE" in
	podman)
		ENGINE=(podman)
		if [[ -z "${PODMPI_PODMAN_FLAGS+set}" ]]; then
			PODMPI_PODMAN_FLAGS="--runtime runc --cgroup-manager=cgroupfs --events-backend=file"
		fi
		# shellcheck disable=SC2206 # word splitting of the flag list is intended
		ENGINE+=($PODMPI_PODMAN_FLAGS)
		;;
	docker)
		ENGINE=(docker)
		"${ENGINE[@]}" info >/dev/null 2>&1 ||
			die "docker has no engine to talk to (DOCKER_HOST=${DOCKER_HOST:-unset}); start dockerd or use PODMPI_ENGINE=podman"
		;;
	*) die "PODMPI_ENGINE=$PODMPI_ENGINE: want podman or docker" ;;
	esac
	if [[ -z "${PODMPI_ULIMITS+set}" ]]; then
		local n u
		n=$(ulimit -Hn)
		u=$(ulimit -Hu)
		PODMPI_ULIMITS="--ulimit nofile=${n}:${n}"
		# podman itself runs with nproc capped at 32768, and a container
		# cannot ask for more than its parent has.
		if [[ "$u" == unlimited || "$u" -gt 32768 ]]; then
			u=32768
		fi
		PODMPI_ULIMITS+=" --ulimit nproc=${u}:${u}"
	fi
	# shellcheck disable=SC2206
	ULIMITS=($PODMPI_ULIMITS)
}

image_exists() {
	"${ENGINE[@]}" image inspect "$1" >/dev/null 2>&1
}

# host_arch prints this machine's architecture as Go and OCI name it
# (amd64, arm64, ...).
host_arch() {
	case "$(uname -m)" in
	x86_64) echo amd64 ;;
	aarch64 | arm64) echo arm64 ;;
	*) uname -m ;;
	esac
}

# local_ref NAME prints the reference under which the engine stores the
# local image NAME: podman qualifies a name without a registry part with
# localhost/ (and cannot resolve the short name in a FROM line); docker keeps
# it as it is.
local_ref() {
	local first=${1%%/*}
	if [[ "${ENGINE[0]}" == podman && "$1" == */* && "$first" != *.* && "$first" != *:* && "$first" != localhost ]]; then
		echo "localhost/$1"
	else
		echo "$1"
	fi
}

# need_emulation ARCH WHAT: dies with the fix unless this kernel runs ARCH
# programs through qemu-user-static's binfmt_misc entry with the F flag
# (the interpreter opened at registration, so that it works inside a
# container's root): WHAT runs ARCH programs (RUN steps of an image built
# for that platform, debootstrap's second stage).
need_emulation() {
	local arch=$1 what=$2 q entry=
	case "$arch" in
	arm64) q=aarch64 ;;
	amd64) q=x86_64 ;;
	*) q=$arch ;;
	esac
	[[ "$arch" == "$(host_arch)" ]] && return 0
	local dir=/proc/sys/fs/binfmt_misc
	if [[ ! -e "$dir/status" ]]; then
		die "$what needs $arch emulation, and binfmt_misc is not mounted at $dir: mount -t binfmt_misc binfmt_misc $dir, then apt-get install -y qemu-user-static binfmt-support && update-binfmts --enable qemu-$q"
	fi
	[[ -r "$dir/qemu-$q" ]] && entry=$(cat "$dir/qemu-$q")
	if [[ -z "$entry" ]]; then
		die "$what needs $arch emulation, and $dir has no qemu-$q entry: apt-get install -y qemu-user-static binfmt-support && update-binfmts --enable qemu-$q"
	fi
	if ! grep -qx enabled <<<"$entry"; then
		die "$what needs $arch emulation, and $dir/qemu-$q is disabled: update-binfmts --enable qemu-$q"
	fi
	if ! grep -q '^flags: .*F' <<<"$entry"; then
		die "$what needs $arch emulation, and $dir/qemu-$q lacks the F flag (its interpreter is not found inside a container's root): install Debian's qemu-user-static, whose entries have it, and update-binfmts --enable qemu-$q"
	fi
}
