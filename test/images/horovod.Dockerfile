# A user's Horovod image, not ours: Debian bookworm's openmpi-bin (with the
# OpenSSH client it pulls in) and python3-torch (CPU), PyPI's horovod
# compiled against them (the wheel scripts/horovod-wheel.sh caches, passed
# as the build context horovod-wheels; compiled here when there is none),
# the Horovod allreduce program. No sshd, no podmpi, no USER line (root).
# test/images/build.sh builds it.
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim

FROM scratch AS horovod-wheels

FROM ${BASE_IMAGE} AS base
RUN apt-get update \
    && apt-get install -y --no-install-recommends openmpi-bin python3 python-is-python3 python3-torch \
    && rm -rf /var/lib/apt/lists/* \
    && command -v ssh && ! command -v sshd

FROM base AS horovod
COPY horovod-wheel.sh lib.sh /src/scripts/
COPY --from=horovod-wheels . /var/cache/podmpi/horovod/wheels/
RUN PODMPI_HOROVOD_NICE=0 /src/scripts/horovod-wheel.sh --venv /opt/venv \
    && /opt/venv/bin/horovodrun --check-build

FROM base
COPY --from=horovod /opt/venv /opt/venv
COPY horovod_allreduce.py /usr/local/share/train/horovod_allreduce.py
ENV PATH=/opt/venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
LABEL io.podmpi.test-image=horovod
