# podmpi runtime image with MPICH (Debian trixie: MPICH 4.2.1, Hydra,
# ch4:ucx over UCX 1.18).
#
# Not bookworm: its MPICH 4.0.2 hangs in MPI_Finalize in about a third of
# multi-pod runs. Its finalize closes every UCX endpoint and then waits in a
# blocking PMI barrier; closing a UCX TCP endpoint that has sent anything
# sends an empty PUT and waits for the peer's acknowledgement, which a peer
# already in that barrier never sends. MPICH 4.2 no longer leaves a rank in
# the barrier while others close (images/README.md, "MPICH: why trixie").
#
#   make images            (or: images/build.sh mpich)
#
# No OpenSSH client or server: worker-agent is the SSH server (port 2222) and
# the launcher is Hydra's launcher program. One image serves both roles:
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
ARG BASE_IMAGE=docker.io/library/debian:trixie-slim

# ---- the binaries, from the binaries-only image: /opt/podmpi.
FROM ${PODMPI_IMAGE} AS podmpi

# ---- the MPI smoke test, compiled against this image's MPI.
FROM ${BASE_IMAGE} AS mpi-build
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libmpich-dev \
    && rm -rf /var/lib/apt/lists/*
COPY images/src/allreduce.c /src/allreduce.c
RUN mkdir -p /out && mpicc.mpich -O2 -Wall -Werror -o /out/podmpi-allreduce /src/allreduce.c

# ---- runtime
FROM ${BASE_IMAGE}
# mpich brings Hydra (mpiexec.hydra, hydra_pmi_proxy) and needs no ssh
# package; the last line proves OpenSSH stayed out.
RUN set -eux; \
    apt-get update; \
    apt-get install -y --no-install-recommends mpich python3; \
    ln -s python3 /usr/bin/python; \
    rm -rf /var/lib/apt/lists/*; \
    if dpkg-query -W -f '${db:Status-Status} ${Package}\n' 'openssh-*' 2>/dev/null | grep '^installed' \
        || command -v ssh || command -v sshd; then \
        echo 'OpenSSH must not be in this image' >&2; exit 1; fi

# /opt/podmpi exactly as the podmpi image holds it (worker-agent needs glibc
# 2.28 or later), first on PATH (ENV below): ssh is podmpi's client for
# everything that calls ssh, and mpiexec/mpiexec.hydra/mpirun run the
# launcher's phases before the real ones, so that a command without
# "launcher --" gets them.
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
    test "$(command -v ssh)" = /opt/podmpi/bin/ssh; test "$(command -v mpiexec)" = /opt/podmpi/bin/mpiexec


ARG VERSION=devel
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="podmpi-mpich" \
      org.opencontainers.image.description="MPICH 4.2 (Hydra) runtime with podmpi worker-agent and launcher; no OpenSSH; non-root (1000:0), read-only-root ready" \
      org.opencontainers.image.source="https://github.com/podmpi/podmpi" \
      org.opencontainers.image.url="https://github.com/podmpi/podmpi/tree/main/images" \
      org.opencontainers.image.documentation="https://github.com/podmpi/podmpi/blob/main/images/README.md" \
      org.opencontainers.image.vendor="podmpi" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="docker.io/library/debian:trixie-slim" \
      io.podmpi.mpi="mpich"

# UCX: shared memory between the ranks of a pod, TCP between pods. With
# UCX_POSIX_USE_PROC_LINK=n a rank maps a peer's /dev/shm segment by its name
# instead of through the peer's /proc/<pid>/fd, which needs ptrace read
# access to the peer. (It was once thought to cure a hang in MPI_Finalize:
# measured, it does not; that hang was bookworm's MPICH 4.0.2, see above.)
# SHELL: no passwd entry under an arbitrary UID, so say which shell runs
# remote commands (worker-agent) and which shell mpirun assumes locally.
ENV PATH=/opt/podmpi/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/home/mpiuser \
    SHELL=/bin/bash \
    TMPDIR=/tmp \
    UCX_TLS=self,sm,tcp \
    UCX_POSIX_USE_PROC_LINK=n
USER 1000:0
WORKDIR /home/mpiuser
EXPOSE 2222 9022
CMD ["worker-agent", "--ssh.listen-address", ":2222", "--web.listen-address", ":9022"]
