# podmpi runtime image with Intel MPI (Intel MPI Library 2021.19 from PyPI's
# impi-rt wheel, over Debian bookworm's libfabric 1.17), and mpi4py.
#
#   make images            (or: images/build.sh intelmpi)
#
# No Intel apt repository: the runtime is PyPI's impi-rt wheel, installed
# into a venv at /opt/intel/mpi (I_MPI_ROOT) with mpi4py's wheel, as mpi4py's
# documentation pairs them. impi-rt asks for a "libfabric" distribution that
# PyPI does not serve, so the wheels are installed without dependencies and
# Debian's libfabric1 carries the ranks' traffic (its tcp;ofi_rxm provider).
# images/build.sh mounts the wheels scripts/intelmpi.sh cached at /wheels
# (podman); without them pip downloads the same wheels from PyPI.
#
# No OpenSSH client or server: worker-agent is the SSH server (port 2222) and
# podmpi-rsh is Hydra's bootstrap program. One image serves both roles:
#   worker   (default CMD)  worker-agent --ssh.listen-address :2222 --web.listen-address :9022
#   launcher                launcher -- mpirun -np N podmpi-allreduce
# Runs as UID 1000, GID 0 by default and under any UID with GID 0 and a
# read-only root file system: it writes only to /tmp (mount an emptyDir there)
# and /dev/shm, and to $HOME (/home/mpiuser) when a job writes there (the
# Kubeflow SDK's command does: mount an emptyDir there too). python3 (the
# venv's, with mpi4py) is first on PATH after podmpi's, for the SDK's command.
# The build context is the repository root.

# The binaries: the podmpi image (images/podmpi.Dockerfile), which
# images/build.sh builds first and passes here.
ARG PODMPI_IMAGE=localhost/podmpi/podmpi:latest
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim
# The one place these versions are set: scripts/intelmpi.sh and the tests
# read them here.
ARG INTEL_MPI_VERSION=2021.19.0
ARG MPI4PY_VERSION=4.1.2

# ---- the binaries, from the binaries-only image: /opt/podmpi.
FROM ${PODMPI_IMAGE} AS podmpi

# ---- Intel MPI and mpi4py in a venv at /opt/intel/mpi, and the MPI smoke
# test compiled with Intel's mpicc (gcc underneath).
FROM ${BASE_IMAGE} AS impi
ARG INTEL_MPI_VERSION
ARG MPI4PY_VERSION
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev python3 python3-venv libfabric1 \
    && rm -rf /var/lib/apt/lists/*
RUN set -eux; \
    python3 -m venv /opt/intel/mpi; \
    if ls /wheels/impi_rt-${INTEL_MPI_VERSION}-*.whl /wheels/impi_devel-${INTEL_MPI_VERSION}-*.whl /wheels/mpi4py-${MPI4PY_VERSION}-*.whl >/dev/null 2>&1; then \
        from='--no-index --find-links /wheels'; else from='--only-binary=:all:'; fi; \
    /opt/intel/mpi/bin/pip install --disable-pip-version-check --no-cache-dir --no-deps $from \
        "impi-rt==${INTEL_MPI_VERSION}" "impi-devel==${INTEL_MPI_VERSION}" "mpi4py==${MPI4PY_VERSION}"
COPY images/src/allreduce.c /src/allreduce.c
RUN mkdir -p /out && I_MPI_ROOT=/opt/intel/mpi /opt/intel/mpi/bin/mpicc -O2 -Wall -Werror -o /out/podmpi-allreduce /src/allreduce.c
# The runtime keeps what runs: no compiler wrappers and headers
# (impi-devel), no pip. A wheel cannot hold symlinks, so each shared
# library's soname links arrive as full copies (libmpi.so, .so.12,
# .so.12.0, .so.12.0.0: 16 MB each); identical copies become symlinks to
# the longest name, as Intel's own packages lay them out.
RUN set -eux; \
    /opt/intel/mpi/bin/pip uninstall --disable-pip-version-check -y impi-devel pip setuptools; \
    cd /opt/intel/mpi/lib; \
    bash -c 'set -euo pipefail; declare -A keep; \
        for f in $(ls -1 | grep "\.so" | awk "{ print length, \$0 }" | sort -rn | cut -d" " -f2); do \
            [[ -f $f && ! -L $f ]] || continue; \
            s=$(sha256sum "$f" | cut -c1-64); \
            if [[ -n ${keep[$s]:-} ]]; then ln -sf "${keep[$s]}" "$f"; else keep[$s]=$f; fi; \
        done'; \
    rm -f /opt/intel/mpi/bin/activate* /opt/intel/mpi/bin/Activate.ps1; \
    du -sh /opt/intel/mpi

# ---- runtime
FROM ${BASE_IMAGE}
# python3-minimal runs the venv's python3 (mpi4py, the SDK's function);
# libfabric1 is Intel MPI's fabric library. Neither brings OpenSSH; the last
# line proves it stayed out.
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends python3-minimal libfabric1; \
    rm -rf /var/lib/apt/lists/*; \
    if dpkg-query -W -f '${db:Status-Status} ${Package}\n' 'openssh-*' 2>/dev/null | grep '^installed' \
        || command -v ssh || command -v sshd; then \
        echo 'OpenSSH must not be in this image' >&2; exit 1; fi

# /opt/podmpi exactly as the podmpi image holds it (worker-agent needs glibc
# 2.28 or later), first on PATH (ENV below), before Intel's bin: ssh is
# podmpi's client for everything that calls ssh, and mpirun/mpiexec/
# mpiexec.hydra run the launcher's phases before Intel's, so that a command
# without "launcher --" gets them. Intel MPI sits at the same path in every
# pod of the job, as Hydra needs: it starts hydra_bstrap_proxy on the other
# hosts by the absolute path it has on the launcher.
COPY --from=podmpi /opt/podmpi /opt/podmpi
COPY --from=impi /opt/intel/mpi /opt/intel/mpi
COPY --from=impi /out/podmpi-allreduce /usr/local/bin/
# mpiuser: UID 1000 in group 0 (an arbitrary OpenShift UID also runs with GID
# 0), so everything the job may write is group 0 and group-writable (g=u).
# /home/mpiuser/.ssh is where Trainer v2 mounts the job's SSH Secret.
RUN set -eux; \
    useradd --uid 1000 --gid 0 --no-user-group --create-home --home-dir /home/mpiuser --shell /bin/bash mpiuser; \
    mkdir -p /home/mpiuser/.ssh; \
    chown -R 1000:0 /home/mpiuser; \
    chmod -R g=u /home/mpiuser; \
    chmod 1777 /tmp; \
    PATH=/opt/podmpi/bin:/opt/intel/mpi/bin:$PATH; \
    worker-agent --help >/dev/null; launcher --help >/dev/null; \
    test "$(command -v ssh)" = /opt/podmpi/bin/ssh; test "$(command -v mpirun)" = /opt/podmpi/bin/mpirun; \
    test "$(command -v python3)" = /opt/intel/mpi/bin/python3; \
    I_MPI_ROOT=/opt/intel/mpi /opt/intel/mpi/bin/mpiexec.hydra --version | grep -q 'Intel(R) MPI Library'; \
    python3 -c 'import mpi4py; print("mpi4py", mpi4py.__version__)'

ARG VERSION=devel
ARG REVISION=unknown
ARG CREATED=unknown
ARG INTEL_MPI_VERSION
LABEL org.opencontainers.image.title="podmpi-intelmpi" \
      org.opencontainers.image.description="Intel MPI ${INTEL_MPI_VERSION} (PyPI impi-rt) runtime with mpi4py and podmpi worker-agent and launcher; no OpenSSH; non-root (1000:0), read-only-root ready" \
      org.opencontainers.image.source="https://github.com/podmpi/podmpi" \
      org.opencontainers.image.url="https://github.com/podmpi/podmpi/tree/main/images" \
      org.opencontainers.image.documentation="https://github.com/podmpi/podmpi/blob/main/images/README.md" \
      org.opencontainers.image.vendor="podmpi" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="docker.io/library/debian:bookworm-slim" \
      io.podmpi.mpi="intelmpi"

# Everything Intel's vars.sh would set, here so that every process sees it
# (hydra proxies started by worker-agent read no profile): I_MPI_ROOT and
# PATH; libmpi is found through the programs' rpath (Intel's mpicc sets one)
# and mpi4py's own loader. Pods have TCP and /dev/shm: libfabric's tcp
# provider between pods, shared memory within one.
# SHELL: no passwd entry under an arbitrary UID, so say which shell runs
# remote commands (worker-agent) and which shell mpirun assumes locally.
ENV I_MPI_ROOT=/opt/intel/mpi \
    PATH=/opt/podmpi/bin:/opt/intel/mpi/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/home/mpiuser \
    SHELL=/bin/bash \
    TMPDIR=/tmp \
    I_MPI_FABRICS=shm:ofi \
    FI_PROVIDER=tcp
USER 1000:0
WORKDIR /home/mpiuser
EXPOSE 2222 9022
CMD ["worker-agent", "--ssh.listen-address", ":2222", "--web.listen-address", ":9022"]
