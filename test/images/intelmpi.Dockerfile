# A user's image with Intel MPI from PyPI, not ours: impi-rt in a venv at
# /opt/intel/mpi (first on PATH, I_MPI_ROOT set, as Intel's vars.sh would),
# over Debian's libfabric, python from that venv for the Kubeflow SDK's
# command, the allreduce program (built with impi-devel's mpicc). No sshd,
# no podmpi, no USER line (root). The wheels are the ones
# scripts/intelmpi.sh cached, mounted at /wheels by test/images/build.sh:
# nothing is fetched from PyPI inside the build.
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim
ARG INTEL_MPI_VERSION=2021.19.0

FROM ${BASE_IMAGE} AS build
ARG INTEL_MPI_VERSION
RUN apt-get update \
    && apt-get install -y --no-install-recommends gcc libc6-dev python3 python3-venv libfabric1 \
    && rm -rf /var/lib/apt/lists/*
RUN python3 -m venv /opt/intel/mpi \
    && /opt/intel/mpi/bin/pip install --disable-pip-version-check --no-cache-dir --no-deps --no-index \
       --find-links /wheels "impi-rt==${INTEL_MPI_VERSION}" "impi-devel==${INTEL_MPI_VERSION}"
COPY allreduce.c /src/allreduce.c
RUN I_MPI_ROOT=/opt/intel/mpi /opt/intel/mpi/bin/mpicc -O2 -Wall -o /out-allreduce /src/allreduce.c \
    && /opt/intel/mpi/bin/pip uninstall --disable-pip-version-check -y impi-devel

FROM ${BASE_IMAGE}
RUN apt-get update \
    && apt-get install -y --no-install-recommends python3 libfabric1 \
    && rm -rf /var/lib/apt/lists/* \
    && ! command -v sshd
COPY --from=build /opt/intel/mpi /opt/intel/mpi
COPY --from=build /out-allreduce /usr/local/bin/allreduce
ENV I_MPI_ROOT=/opt/intel/mpi \
    PATH=/opt/intel/mpi/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    FI_PROVIDER=tcp
RUN mpiexec.hydra --version | grep -q 'Intel(R) MPI Library' && python --version
LABEL io.podmpi.test-image=intelmpi
