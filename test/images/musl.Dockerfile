# An image podmpi cannot serve: musl, no glibc at all (Alpine-like), built
# without Docker Hub: FROM scratch with Debian's musl (its loader and libc),
# busybox-static for a shell, and a program linked against musl. No MPI,
# no USER line (root). The runtimes' worker-agent (glibc) cannot run here:
# podmpi must say so, not "no such file or directory".
ARG BASE_IMAGE=docker.io/library/debian:bookworm-slim

FROM ${BASE_IMAGE} AS build
RUN apt-get update \
    && apt-get install -y --no-install-recommends musl musl-tools busybox-static \
    && rm -rf /var/lib/apt/lists/*
RUN set -eux; \
    printf '#include <stdio.h>\nint main(void) { puts("hello from musl"); return 0; }\n' >/tmp/hello.c; \
    mkdir -p /out/lib /out/bin /out/usr/local/bin; \
    musl-gcc -O2 -o /out/usr/local/bin/hello /tmp/hello.c; \
    cp -L /lib/ld-musl-*.so.1 /out/lib/; \
    cp /bin/busybox /out/bin/busybox

FROM scratch
COPY --from=build /out/ /
RUN ["/bin/busybox", "--install", "-s", "/bin"]
RUN ["/usr/local/bin/hello"]
ENV PATH=/usr/local/bin:/bin
LABEL io.podmpi.test-image=musl
CMD ["/bin/sh"]
