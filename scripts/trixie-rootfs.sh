#!/usr/bin/env bash
# Builds (once) the Debian trixie root the Open MPI 5 (PRRTE) end-to-end test
# chroots into: openmpi-bin 5.0 with its compiler. Cached in
# ${PODMPI_TRIXIE_ROOTFS:-/var/cache/podmpi/trixie-rootfs}; rebuilt only when
# missing. Root only; takes a few minutes. See scripts/debian-rootfs.sh.
set -euo pipefail
dest=${PODMPI_TRIXIE_ROOTFS:-/var/cache/podmpi/trixie-rootfs}
"$(dirname "$0")/debian-rootfs.sh" --suite trixie --dest "$dest" \
  --check usr/bin/prted --check usr/bin/mpicc.openmpi \
  -- openmpi-bin libopenmpi-dev gcc libc6-dev
echo "trixie rootfs: $(chroot "$dest" mpirun.openmpi --version 2>/dev/null | head -1 || echo "Open MPI version unknown (not root?)")"
