# An image podmpi cannot serve: glibc (Debian bookworm) with python and no
# MPI at all. No USER line (root). podmpi must say there is no MPI, at
# once, not "mpirun: not found" after minutes of retries.
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${BASE_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 python-is-python3 \
    && rm -rf /var/lib/apt/lists/* \
    && ! command -v mpirun && ! command -v mpiexec
LABEL io.podmpi.test-image=nompi
