#!/usr/bin/env bash
# Builds (once) the Debian bullseye root that worker-agent is built against
# (make build, scripts/build.sh): bullseye's glibc 2.31 headers, crt files and
# libraries, used as the C compiler's sysroot. A binary linked against it
# asks for no glibc symbol version newer than the ones 2.31 and older
# releases define, so it starts on glibc 2.28 and later (UBI 8, Debian 11,
# Ubuntu 20.04, ...). The root is also a real bullseye system the glibc test
# (images/glibctest) runs the binaries in.
#
# Cached in ${PODMPI_BULLSEYE_ROOTFS:-/var/cache/podmpi/bullseye-rootfs};
# rebuilt only when missing. Root only; about 45 s and 250 MB. See
# scripts/debian-rootfs.sh.
set -euo pipefail
dest=${PODMPI_BULLSEYE_ROOTFS:-/var/cache/podmpi/bullseye-rootfs}
# This machine's architecture: debootstrap makes a root of the same one.
triplet=$(dpkg-architecture -qDEB_HOST_MULTIARCH 2>/dev/null || gcc -print-multiarch 2>/dev/null || echo x86_64-linux-gnu)
exec "$(dirname "$0")/debian-rootfs.sh" --suite bullseye --dest "$dest" --sysroot \
  --check usr/include/stdio.h --check "usr/lib/$triplet/libc_nonshared.a" \
  --check "usr/lib/$triplet/libdl.so" --check "usr/lib/$triplet/libresolv.so" \
  -- libc6-dev
