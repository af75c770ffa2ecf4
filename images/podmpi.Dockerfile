# podmpi binaries-only image: FROM scratch, nothing but /opt/podmpi. It is the
# COPY --from source for your own images, and the MPI images of this
# directory are built from it:
#
#   COPY --from=ghcr.io/podmpi/podmpi:v0.1.0 /opt/podmpi /opt/podmpi
#
# or, for an image you do not rebuild, an init container that copies the
# tree into an emptyDir the launcher and worker containers mount at
# /opt/podmpi (the image has no shell and no cp; the static launcher copies):
#
#   command: [/opt/podmpi/bin/launcher, install, /podmpi]
#
#   /opt/podmpi/bin/worker-agent     the worker container's command: -> launcher,
#                                    which checks that the image can run the
#                                    real one (exit 75 naming what is missing)
#                                    and runs it
#   /opt/podmpi/libexec/worker-agent the real worker-agent (cgo, NVML through
#                                    dlopen); needs glibc 2.28 or later
#   /opt/podmpi/bin/launcher         the launcher container's command (static)
#   /opt/podmpi/bin/podmpi-rsh       the ssh-compatible client (static): a
#                                    relay of the launcher's shared
#                                    connections under its mpirun, else the
#                                    launcher's full client
#   /opt/podmpi/bin/ssh              -> podmpi-rsh
#   /opt/podmpi/bin/mpirun, mpiexec, mpiexec.hydra
#                                    -> launcher: the launcher's phases, then
#                                    the real program after /opt/podmpi/bin
#   /opt/podmpi/sbom/podmpi.spdx.json    SPDX 2.3 SBOM of the three binaries
#   /opt/podmpi/sbom/<binary>.go-version-m.txt   "go version -m" of each
#   /opt/podmpi/LICENSE, /opt/podmpi/NOTICE
#
# bin/ and libexec/ are laid out exactly as "make build" lays out ./bin and
# ./libexec (scripts/build.sh makes both); images/layout.sh writes the rest,
# here and for images/build.sh with PODMPI_PREBUILT. Putting /opt/podmpi/bin first on PATH is the whole
# integration:
#
#   ENV PATH=/opt/podmpi/bin:$PATH
#
#   images/build.sh podmpi                                   (this machine's arch)
#   PODMPI_PLATFORMS=linux/amd64,linux/arm64 images/build.sh podmpi
#
# Multi-arch without emulation: the build stage runs on the build machine's
# architecture and cross-compiles (worker-agent with Debian bullseye's
# aarch64 cross compiler and glibc 2.31); the final stage only copies.

ARG GO_IMAGE=docker.io/library/golang:1.26-bookworm
# The build stage's glibc decides which glibc worker-agent needs: bullseye's
# 2.31 makes a binary that asks for nothing newer than 2.28's symbols.
ARG BUILD_IMAGE=docker.io/library/debian:bullseye-slim

FROM --platform=$BUILDPLATFORM ${GO_IMAGE} AS go

FROM --platform=$BUILDPLATFORM ${BUILD_IMAGE} AS build
ARG TARGETARCH
RUN set -eux; \
    cross=; \
    if [ "$TARGETARCH" = arm64 ] && [ "$(dpkg --print-architecture)" != arm64 ]; then \
        cross="gcc-aarch64-linux-gnu libc6-dev-arm64-cross"; \
    fi; \
    apt-get update; \
    apt-get install -y --no-install-recommends gcc libc6-dev binutils $cross; \
    rm -rf /var/lib/apt/lists/*
# Go, and the CA bundle "go mod download" trusts, from the Go image.
COPY --from=go /usr/local/go /usr/local/go
COPY --from=go /etc/ssl/certs/ca-certificates.crt /etc/ssl/certs/ca-certificates.crt
ENV PATH=/usr/local/go/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    GOPATH=/go GOTOOLCHAIN=local GOFLAGS=-buildvcs=false
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
ARG VERSION=devel
ARG REVISION=unknown
ARG CREATED=unknown
RUN set -eu; \
    GOARCH="$TARGETARCH" PODMPI_SYSROOT=system VERSION="$VERSION" COMMIT="$REVISION" \
        scripts/build.sh /out/opt/podmpi/bin; \
    CREATED="$CREATED" VERSION="$VERSION" images/layout.sh /out/opt/podmpi/bin /out/opt/podmpi

FROM scratch
COPY --from=build /out/opt/podmpi /opt/podmpi
ARG VERSION=devel
ARG REVISION=unknown
ARG CREATED=unknown
LABEL org.opencontainers.image.title="podmpi" \
      org.opencontainers.image.description="podmpi worker-agent and launcher only, in /opt/podmpi (FROM scratch): the COPY --from source for MPI images; worker-agent needs glibc 2.28+" \
      org.opencontainers.image.source="https://github.com/podmpi/podmpi" \
      org.opencontainers.image.url="https://github.com/podmpi/podmpi/tree/main/images" \
      org.opencontainers.image.documentation="https://github.com/podmpi/podmpi/blob/main/images/README.md" \
      org.opencontainers.image.vendor="podmpi" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.created="${CREATED}" \
      org.opencontainers.image.base.name="scratch" \
      io.podmpi.glibc.min="2.28"
