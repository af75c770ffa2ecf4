# A user's image with MPICH from Debian, not ours: trixie's mpich (4.2,
# Hydra; bookworm's 4.0 hangs in MPI_Finalize across pods, see
# images/README.md) and what it pulls in, python for the Kubeflow SDK's
# command, the allreduce program. No sshd, no podmpi, no USER line (root).
# test/images/build.sh builds it.
ARG BASE_IMAGE=docker.io/library/debian:trixie-slim

FROM ${BASE_IMAGE} AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev libmpich-dev \
    && rm -rf /var/lib/apt/lists/*
COPY allreduce.c /src/allreduce.c
RUN mpicc.mpich -O2 -Wall -o /usr/local/bin/allreduce /src/allreduce.c

FROM ${BASE_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends mpich python3 python-is-python3 \
    && rm -rf /var/lib/apt/lists/* \
    && ! command -v sshd
COPY --from=build /usr/local/bin/allreduce /usr/local/bin/allreduce
LABEL io.podmpi.test-image=mpich
