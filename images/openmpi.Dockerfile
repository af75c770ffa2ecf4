# podmpi runtime image with Open MPI (Debian bookworm: Open MPI 4.1.4, ORTE).
#
#   make images            (or: images/build.sh openmpi)
#
# No OpenSSH client or server: worker-agent is the SSH server (port 2222) and
# the launcher is mpirun's ssh program. One image serves both roles:
#   worker   (default CMD)  worker-agent --ssh.listen-address :2222 --web.listen-address :9022
#   launcher                launcher -- mpirun -np N podmpi-allreduce
# Runs as UID 1000, GID 0 by default and under any UID with GID 0 and a
# read-only root file system: it writes only to /tmp (mount an emptyDir there)
# and /dev/shm, and to $HOME (/home/mpiuser) when a job writes there (the
# Kubeflow SDK's command does: mount an emptyDir there too). python3 (its whole
# standard library) is here for the SDK's command, which runs "python" on the
# function it writes, and for the SDK itself in a rank that reports progress
# (update_trainjob_status imports the Kubernetes client). The
# build context is the repository root.

# The binaries: the podmpi image (images/podmpi.Dockerfile), which
# images/build.sh builds first and passes here.
ARG PODMPI_IMAGE=localhost/podmpi/podmpi:latest
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim

# ---- the binaries, from the binaries-only image: /opt/podmpi.
FROM ${PODMPI_IMAGE} AS podmpi

# ---- the MPI smoke test, compiled against this image's MPI.
FROM ${BASE_IMAGE} AS mpi-build
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libopenmpi-dev \
    && rm -rf /var/lib/apt/lists/*
COPY images/src/allreduce.c /src/allreduce.c
RUN mkdir -p /out && mpicc.openmpi -O2 -Wall -Werror -o /out/podmpi-allreduce /src/allreduce.c

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
        ' shell of mpirun and orted in this image; OpenSSH is not installed.' \
        > /tmp/pkg/DEBIAN/control; \
    dpkg-deb --root-owner-group --build /tmp/pkg /tmp/podmpi-ssh-client.deb; \
    apt-get update; \
    apt-get install -y --no-install-recommends /tmp/podmpi-ssh-client.deb openmpi-bin python3; \
    ln -s python3 /usr/bin/python; \
    rm -rf /var/lib/apt/lists/* /tmp/pkg /tmp/podmpi-ssh-client.deb; \
    if dpkg-query -W -f '${db:Status-Status} ${Package}\n' 'openssh-*' 2>/dev/null | grep '^installed' \
        || command -v ssh || command -v sshd; then \
        echo 'OpenSSH must not be in this image' >&2; exit 1; fi

# /opt/podmpi exactly as the podmpi image holds it (worker-agent needs glibc
# 2.28 or later), first on PATH (ENV below): ssh is podmpi's client for
# mpirun, orted's tree spawn and anyone else, and mpirun/mpiexec run the
# launcher's phases before the real ones, so that a command without
# "launcher --" (the Kubeflow SDK's) gets them too.
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
    PATH=/opt/podmpi/bin:$PATH; \
    worker-agent --help >/dev/null; launcher --help >/dev/null; \
    test "$(command -v ssh)" = /opt/podmpi/bin/ssh; test "$(command -v mpirun)" = /opt/podmpi/bin/mpirun

ARG VERSION=devel
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="podmpi-openmpi" \
      org.opencontainers.image.description="Open MPI 4.1 runtime with podmpi worker-agent and launcher; no OpenSSH; non-root (1000:0), read-only-root ready" \
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

# Single-copy (CMA) needs ptrace rights between ranks, which a pod with all
# capabilities dropped does not have; shared memory without it is still used.
# SHELL: no passwd entry under an arbitrary UID, so say which shell runs
# remote commands (worker-agent) and which shell mpirun assumes locally.
ENV PATH=/opt/podmpi/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/home/mpiuser \
    SHELL=/bin/bash \
    TMPDIR=/tmp \
    OMPI_MCA_btl_vader_single_copy_mechanism=none
USER 1000:0
WORKDIR /home/mpiuser
EXPOSE 2222 9022
CMD ["worker-agent", "--ssh.listen-address", ":2222", "--web.listen-address", ":9022"]
