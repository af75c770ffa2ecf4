# podmpi runtime image with Intel MPI (oneAPI MPI from Intel's oneAPI apt
# repository on Ubuntu 24.04).
#
#   make images            (or: images/build.sh intelmpi)
#
# Needs Intel's apt repository (apt.repos.intel.com) at build time. No OpenSSH
# client or server: worker-agent is the SSH server (port 2222) and the launcher
# is Hydra's bootstrap program. One image serves both roles:
#   worker   (default CMD)  worker-agent --ssh.listen-address :2222 --web.listen-address :9022
#   launcher                launcher -- mpirun -np N podmpi-allreduce
# Runs as UID 1000, GID 0 by default and under any UID with GID 0 and a
# read-only root file system: it writes only to /tmp (mount an emptyDir there)
# and /dev/shm. The build context is the repository root.

# The binaries: the podmpi image (images/podmpi.Dockerfile), which
# images/build.sh builds first and passes here.
ARG PODMPI_IMAGE=localhost/podmpi/podmpi:latest
ARG BASE_IMAGE=docker.io/library/ubuntu:24.04
# Intel MPI 2021.13 is what mpi-operator's intel image ships; any 2021.x with
# the unified directory layout (2021.11 and later) works.
ARG INTEL_MPI_VERSION=2021.13

# ---- the binaries, from the binaries-only image: /opt/podmpi.
FROM ${PODMPI_IMAGE} AS podmpi

# ---- Intel's oneAPI apt repository, shared by the two stages below.
FROM ${BASE_IMAGE} AS oneapi
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends ca-certificates curl gnupg; \
    curl -fsSL https://apt.repos.intel.com/intel-gpg-keys/GPG-PUB-KEY-INTEL-SW-PRODUCTS.PUB \
        | gpg --dearmor -o /usr/share/keyrings/oneapi-archive-keyring.gpg; \
    echo 'deb [signed-by=/usr/share/keyrings/oneapi-archive-keyring.gpg] https://apt.repos.intel.com/oneapi all main' \
        > /etc/apt/sources.list.d/oneapi.list; \
    apt-get purge -y --auto-remove curl gnupg; \
    rm -rf /var/lib/apt/lists/*

# ---- the MPI smoke test, compiled with Intel MPI's mpicc (gcc underneath).
FROM oneapi AS mpi-build
ARG INTEL_MPI_VERSION
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev \
        intel-oneapi-mpi-${INTEL_MPI_VERSION} intel-oneapi-mpi-devel-${INTEL_MPI_VERSION} \
    && rm -rf /var/lib/apt/lists/*
COPY images/src/allreduce.c /src/allreduce.c
RUN mkdir -p /out && /opt/intel/oneapi/mpi/${INTEL_MPI_VERSION}/bin/mpicc -cc=gcc -O2 -Wall -Werror \
        -o /out/podmpi-allreduce /src/allreduce.c

# ---- runtime
FROM oneapi
ARG INTEL_MPI_VERSION
# Ubuntu images ship a user "ubuntu" with UID 1000; mpiuser takes that UID.
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends intel-oneapi-mpi-${INTEL_MPI_VERSION}; \
    rm -rf /var/lib/apt/lists/*; \
    if dpkg-query -W -f '${db:Status-Status} ${Package}\n' 'openssh-*' 2>/dev/null | grep '^installed' \
        || command -v ssh || command -v sshd; then \
        echo 'OpenSSH must not be in this image' >&2; exit 1; fi; \
    if id -u ubuntu >/dev/null 2>&1; then userdel --remove ubuntu; fi

# The environment of Intel's vars.sh, fixed here so that every process sees it
# (including hydra proxies started by worker-agent, which read no profile).
ENV I_MPI_ROOT=/opt/intel/oneapi/mpi/${INTEL_MPI_VERSION} \
    FI_PROVIDER_PATH=/opt/intel/oneapi/mpi/${INTEL_MPI_VERSION}/opt/mpi/libfabric/lib/prov \
    LD_LIBRARY_PATH=/opt/intel/oneapi/mpi/${INTEL_MPI_VERSION}/lib:/opt/intel/oneapi/mpi/${INTEL_MPI_VERSION}/opt/mpi/libfabric/lib \
    PATH=/opt/podmpi/bin:/opt/intel/oneapi/mpi/${INTEL_MPI_VERSION}/bin:/opt/intel/oneapi/mpi/${INTEL_MPI_VERSION}/opt/mpi/libfabric/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# /opt/podmpi exactly as the podmpi image holds it (worker-agent needs glibc
# 2.28 or later), first on PATH: ssh is podmpi's client for everything that
# calls ssh, and mpirun/mpiexec/mpiexec.hydra run the launcher's phases
# before the real ones, so that a command without "launcher --" gets them.
COPY --from=podmpi /opt/podmpi /opt/podmpi
COPY --from=mpi-build /out/podmpi-allreduce /usr/local/bin/
# mpiuser: UID 1000 in group 0 (an arbitrary OpenShift UID also runs with GID
# 0), so everything the job may write is group 0 and group-writable (g=u).
# /home/mpiuser/.ssh is where Trainer v2 mounts the job's SSH Secret.
RUN set -eux; \
    useradd --uid 1000 --gid 0 --no-user-group --create-home --home-dir /home/mpiuser --shell /bin/bash mpiuser; \
    mkdir -p /home/mpiuser/.ssh; \
    chown -R 1000:0 /home/mpiuser; \
    chmod -R g=u /home/mpiuser; \
    chmod 1777 /tmp; \
    worker-agent --help >/dev/null; launcher --help >/dev/null; \
    test "$(command -v ssh)" = /opt/podmpi/bin/ssh; test "$(command -v mpirun)" = /opt/podmpi/bin/mpirun


ARG VERSION=devel
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="podmpi-intelmpi" \
      org.opencontainers.image.description="Intel MPI (oneAPI) runtime with podmpi worker-agent and launcher; no OpenSSH; non-root (1000:0), read-only-root ready" \
      org.opencontainers.image.source="https://github.com/podmpi/podmpi" \
      org.opencontainers.image.url="https://github.com/podmpi/podmpi/tree/main/images" \
      org.opencontainers.image.documentation="https://github.com/podmpi/podmpi/blob/main/images/README.md" \
      org.opencontainers.image.vendor="podmpi" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="docker.io/library/ubuntu:24.04" \
      io.podmpi.mpi="intelmpi"

# Pods have TCP and /dev/shm; libfabric's tcp provider between pods, shared
# memory within one.
# SHELL: no passwd entry under an arbitrary UID, so say which shell runs
# remote commands (worker-agent) and which shell mpirun assumes locally.
ENV HOME=/home/mpiuser \
    SHELL=/bin/bash \
    TMPDIR=/tmp \
    I_MPI_FABRICS=shm:ofi \
    FI_PROVIDER=tcp
USER 1000:0
WORKDIR /home/mpiuser
EXPOSE 2222 9022
CMD ["worker-agent", "--ssh.listen-address", ":2222", "--web.listen-address", ":9022"]
