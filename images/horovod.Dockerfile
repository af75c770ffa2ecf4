# podmpi runtime image with Horovod and PyTorch (CPU) over Open MPI 4.1
# (Debian bookworm): Debian's python3-torch 1.13.1 and PyPI's horovod 0.28.1
# compiled against it, with MPI and Gloo (elastic horovodrun).
#
#   make images            (or: images/build.sh horovod)
#
# PyPI serves horovod only as source (about 8 CPU-minutes of compiling).
# scripts/horovod-wheel.sh compiles it once per machine and caches the wheel,
# with the wheels of its Python dependencies, by the versions it depends on;
# images/build.sh passes that cache's wheels/ folder as the build context
# "horovod-wheels", and the same script, run here, installs the wheel whose
# key is this image's (the python3-torch, Open MPI and Python this image
# installs) or, when there is none (a plain `docker build`, another Debian
# point release), compiles it here. Needs Debian's apt at build time, and
# PyPI only to compile; nothing from download.pytorch.org.
#
# No OpenSSH client or server: worker-agent is the SSH server (port 2222) and
# podmpi's ssh (/opt/podmpi/bin, first on PATH) is the ssh of mpirun and of
# horovodrun, whose pre-flight and task lines it accepts. One image serves
# both roles:
#   worker   (default CMD)  worker-agent --ssh.listen-address :2222 --web.listen-address :9022
#   launcher                horovodrun -np N -H w-0.job:1,w-1.job:1 -p 2222 python3 /usr/local/share/podmpi/horovod_allreduce.py
#                           or launcher -- mpirun -np N python3 /usr/local/share/podmpi/horovod_allreduce.py
#   elastic                 horovodrun -np 2 --min-np 2 --max-np 3 -p 2222 \
#                             --host-discovery-script "launcher discover-hosts" \
#                             python3 /usr/local/share/podmpi/horovod_elastic.py
# Runs as UID 1000, GID 0 by default and under any UID with GID 0 and a
# read-only root file system: it writes to /tmp (mount an emptyDir there),
# /dev/shm, and, for horovodrun, to $HOME/.horovod (its host checks, kept an
# hour): mount an emptyDir at /home/mpiuser too, as the example runtimes do,
# or pass horovodrun --disable-cache. The build context is the repository
# root.

# The binaries: the podmpi image (images/podmpi.Dockerfile), which
# images/build.sh builds first and passes here.
ARG PODMPI_IMAGE=localhost/podmpi/podmpi:latest
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim

# ---- the binaries, from the binaries-only image: /opt/podmpi.
FROM ${PODMPI_IMAGE} AS podmpi

# ---- wheels compiled earlier by scripts/horovod-wheel.sh: images/build.sh
# replaces this empty stage with its cache's wheels/ folder
# (--build-context horovod-wheels=<cache>/wheels, podman 4.3+ or BuildKit).
FROM scratch AS horovod-wheels

# ---- Open MPI, Debian's PyTorch (CPU), python3; no OpenSSH.
FROM ${BASE_IMAGE} AS base
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
    apt-get install -y --no-install-recommends /tmp/podmpi-ssh-client.deb openmpi-bin python3 python3-torch; \
    ln -s python3 /usr/bin/python; \
    rm -rf /var/lib/apt/lists/* /tmp/pkg /tmp/podmpi-ssh-client.deb; \
    if dpkg-query -W -f '${db:Status-Status} ${Package}\n' 'openssh-*' 2>/dev/null | grep '^installed' \
        || command -v ssh || command -v sshd; then \
        echo 'OpenSSH must not be in this image' >&2; exit 1; fi

# ---- Horovod in the venv /opt/venv (--system-site-packages: Debian's
# torch), from the cached wheel of this image's key, else compiled here
# (the compilers stay in this stage).
FROM base AS horovod
COPY scripts/horovod-wheel.sh scripts/lib.sh /src/scripts/
COPY --from=horovod-wheels . /var/cache/podmpi/horovod/wheels/
RUN set -eux; \
    PODMPI_HOROVOD_NICE=0 /src/scripts/horovod-wheel.sh --venv /opt/venv; \
    /opt/venv/bin/horovodrun --check-build

# ---- runtime
FROM base
COPY --from=horovod /opt/venv /opt/venv
COPY images/src/horovod_allreduce.py images/src/horovod_elastic.py /usr/local/share/podmpi/

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
    PATH=/opt/podmpi/bin:/opt/venv/bin:$PATH; \
    worker-agent --help >/dev/null; launcher --help >/dev/null; \
    test "$(command -v ssh)" = /opt/podmpi/bin/ssh; test "$(command -v mpirun)" = /opt/podmpi/bin/mpirun; \
    test "$(command -v python3)" = /opt/venv/bin/python3; \
    python3 -c 'import horovod.torch, torch'

ARG VERSION=devel
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="podmpi-horovod" \
      org.opencontainers.image.description="Horovod 0.28.1 (MPI, Gloo) + Debian's PyTorch 1.13.1 (CPU) on Open MPI 4.1 with podmpi worker-agent and launcher; no OpenSSH; non-root (1000:0), read-only-root ready" \
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
# keep_fqdn_hostnames: horovodrun hands Open MPI 4 `-H w-0.job:1,...`, whose
# subdomain it strips otherwise (the short name does not resolve in a pod);
# podmpi's mpirun sets it too, this covers a PATH without it.
ENV PATH=/opt/podmpi/bin:/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    HOME=/home/mpiuser \
    SHELL=/bin/bash \
    TMPDIR=/tmp \
    PYTHONDONTWRITEBYTECODE=1 \
    XDG_CACHE_HOME=/tmp/.cache \
    TORCH_HOME=/tmp/.cache/torch \
    OMPI_MCA_btl_vader_single_copy_mechanism=none \
    OMPI_MCA_orte_keep_fqdn_hostnames=1
USER 1000:0
WORKDIR /home/mpiuser
EXPOSE 2222 9022
CMD ["worker-agent", "--ssh.listen-address", ":2222", "--web.listen-address", ":9022"]
