# podmpi runtime image with Horovod and PyTorch (CPU build) over Open MPI 4.1
# (Debian bookworm).
#
#   make images            (or: images/build.sh horovod)
#
# Needs PyPI and download.pytorch.org at build time. No OpenSSH client or
# server: worker-agent is the SSH server (port 2222) and podmpi's ssh
# (/opt/podmpi/bin, first on PATH) is the ssh of mpirun and of horovodrun,
# whose pre-flight and task lines it accepts. One image serves both roles:
#   worker   (default CMD)  worker-agent --ssh.listen-address :2222 --web.listen-address :9022
#   launcher                launcher -- mpirun -np N python3 /usr/local/share/podmpi/horovod_allreduce.py
#                           or horovodrun -np N -H w-0:2,w-1:2 -p 2222 python3 ...
# Runs as UID 1000, GID 0 by default and under any UID with GID 0 and a
# read-only root file system: it writes only to /tmp (mount an emptyDir there)
# and /dev/shm. The build context is the repository root.

# The binaries: the podmpi image (images/podmpi.Dockerfile), which
# images/build.sh builds first and passes here.
ARG PODMPI_IMAGE=localhost/podmpi/podmpi:latest
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim
# Horovod 0.28.1 is the last release; it builds against PyTorch up to 2.1.
ARG HOROVOD_VERSION=0.28.1
ARG TORCH_VERSION=2.1.2

# ---- the binaries, from the binaries-only image: /opt/podmpi.
FROM ${PODMPI_IMAGE} AS podmpi

# ---- Horovod compiled against this image's Open MPI and PyTorch, in a venv.
FROM ${BASE_IMAGE} AS hvd-build
ARG HOROVOD_VERSION
ARG TORCH_VERSION
RUN apt-get update \
    && apt-get install -y --no-install-recommends ca-certificates g++ make cmake \
        python3 python3-dev python3-venv libopenmpi-dev \
    && rm -rf /var/lib/apt/lists/*
RUN set -eux; \
    python3 -m venv /opt/venv; \
    /opt/venv/bin/pip install --no-cache-dir --upgrade pip setuptools wheel; \
    /opt/venv/bin/pip install --no-cache-dir --index-url https://download.pytorch.org/whl/cpu "torch==${TORCH_VERSION}+cpu"; \
    /opt/venv/bin/pip install --no-cache-dir packaging psutil pyyaml cloudpickle cffi; \
    HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITHOUT_GLOO=1 \
    HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1 HOROVOD_CPU_OPERATIONS=MPI \
        /opt/venv/bin/pip install --no-cache-dir --no-build-isolation "horovod==${HOROVOD_VERSION}"; \
    /opt/venv/bin/horovodrun --check-build | tee /tmp/check; \
    grep -q '\[X\] PyTorch' /tmp/check; grep -q '\[X\] MPI' /tmp/check

# ---- runtime
FROM ${BASE_IMAGE}
# openmpi-bin depends on "openssh-client | ssh-client". A local empty package
# that provides ssh-client satisfies it truthfully (podmpi-rsh is the ssh
# client) and keeps OpenSSH out of the image; the last line proves it.
RUN set -eux; \
    mkdir -p /tmp/pkg/DEBIAN; \
    printf '%s\n' 'Package: podmpi-ssh-client' 'Version: 1.0' 'Architecture: all' \
        'Maintainer: podmpi <podmpi@users.noreply.github.com>' 'Provides: ssh-client' \
        'Description: podmpi stands in for the ssh client' \
        ' /opt/podmpi/bin/ssh (podmpi-rsh, first on PATH) is the remote' \
        ' shell of mpirun, orted and horovodrun in this image; OpenSSH is not installed.' \
        > /tmp/pkg/DEBIAN/control; \
    dpkg-deb --root-owner-group --build /tmp/pkg /tmp/podmpi-ssh-client.deb; \
    apt-get update; \
    apt-get install -y --no-install-recommends /tmp/podmpi-ssh-client.deb openmpi-bin python3 libgomp1; \
    rm -rf /var/lib/apt/lists/* /tmp/pkg /tmp/podmpi-ssh-client.deb; \
    if dpkg-query -W -f '${db:Status-Status} ${Package}\n' 'openssh-*' 2>/dev/null | grep '^installed' \
        || command -v ssh || command -v sshd; then \
        echo 'OpenSSH must not be in this image' >&2; exit 1; fi
COPY --from=hvd-build /opt/venv /opt/venv
COPY images/src/horovod_allreduce.py /usr/local/share/podmpi/horovod_allreduce.py
ENV PATH=/opt/podmpi/bin:/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin

# /opt/podmpi exactly as the podmpi image holds it (worker-agent needs glibc
# 2.28 or later), first on PATH: ssh is podmpi's client for everything that
# calls ssh, and mpirun/mpiexec/mpiexec.hydra run the launcher's phases
# before the real ones, so that a command without "launcher --" gets them.
COPY --from=podmpi /opt/podmpi /opt/podmpi
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
ARG HOROVOD_VERSION
ARG TORCH_VERSION
LABEL org.opencontainers.image.title="podmpi-horovod" \
      org.opencontainers.image.description="Horovod ${HOROVOD_VERSION} + PyTorch ${TORCH_VERSION} (CPU) on Open MPI 4.1 with podmpi worker-agent and launcher; no OpenSSH; non-root (1000:0), read-only-root ready" \
      org.opencontainers.image.source="https://github.com/podmpi/podmpi" \
      org.opencontainers.image.url="https://github.com/podmpi/podmpi/tree/main/images" \
      org.opencontainers.image.documentation="https://github.com/podmpi/podmpi/blob/main/images/README.md" \
      org.opencontainers.image.vendor="podmpi" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="docker.io/library/debian:bookworm-slim" \
      io.podmpi.mpi="openmpi"

# Read-only root: no .pyc files, caches under /tmp. Single-copy (CMA) needs
# ptrace rights between ranks, which a pod with all capabilities dropped does
# not have.
# SHELL: no passwd entry under an arbitrary UID, so say which shell runs
# remote commands (worker-agent) and which shell mpirun assumes locally.
ENV HOME=/home/mpiuser \
    SHELL=/bin/bash \
    TMPDIR=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    XDG_CACHE_HOME=/tmp/.cache \
    TORCH_HOME=/tmp/.cache/torch \
    OMPI_MCA_btl_vader_single_copy_mechanism=none
USER 1000:0
WORKDIR /home/mpiuser
EXPOSE 2222 9022
CMD ["worker-agent", "--ssh.listen-address", ":2222", "--web.listen-address", ":9022"]
