# A user's image with Open MPI 4 (Debian bookworm: 4.1.4, ORTE), not ours:
# only Debian's openmpi-bin and what it pulls in (the OpenSSH client among
# them, as in most users' images), python for the Kubeflow SDK's command,
# the allreduce program. No sshd, no podmpi, no USER line (root).
# test/images/build.sh builds it; the podmpi runtimes bring podmpi.
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${BASE_IMAGE} AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libopenmpi-dev \
    && rm -rf /var/lib/apt/lists/*
COPY allreduce.c /src/allreduce.c
RUN mpicc -O2 -Wall -o /usr/local/bin/allreduce /src/allreduce.c

FROM ${BASE_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends openmpi-bin python3 python-is-python3 \
    && rm -rf /var/lib/apt/lists/* \
    && command -v ssh && ! command -v sshd
COPY --from=build /usr/local/bin/allreduce /usr/local/bin/allreduce
LABEL io.podmpi.test-image=openmpi4
