#!/usr/bin/env bash
# Builds (once) Intel MPI from PyPI's wheels, for the Intel MPI end-to-end
# tests (test/e2e) and the Intel MPI image (images/intelmpi.Dockerfile).
#
#   scripts/intelmpi.sh            the wheels and the venv
#   scripts/intelmpi.sh --wheels   the wheels only (what the image's build
#                                  needs: images/build.sh runs this, so that
#                                  pip fetches them here, trusting what this
#                                  machine trusts, not inside the build
#                                  container); the last line printed is the
#                                  wheels' folder
#
# Cached in ${PODMPI_INTELMPI_CACHE:-/var/cache/podmpi/intelmpi-<version>}:
#
#   wheels/  impi-rt and impi-devel <version> (runtime; mpicc and headers)
#            and mpi4py, as pip downloaded them (the versions are
#            images/intelmpi.Dockerfile's ARG defaults); the image
#            build installs from here (a build volume) instead of PyPI
#   venv/    a python3 venv with the three installed: bin/mpiexec.hydra,
#            bin/mpirun (a script around it), bin/hydra_bstrap_proxy,
#            bin/hydra_pmi_proxy, bin/mpicc (gcc underneath), lib/libmpi.so.12,
#            include/mpi.h, and mpi4py, which loads that libmpi
#
# pip's HTTP cache is ${PIP_CACHE_DIR:-/var/cache/podmpi/pip} (it stays
# empty where a proxy marks PyPI's files uncacheable, as here: wheels/ is
# what is kept).
#
# What the wheels need, found by installing them (docs/compatibility.md):
#   - impi-rt asks for a "libfabric>=2.6" distribution that PyPI does not
#     have (Intel's own channels do), so pip cannot resolve it: the wheels are
#     installed with --no-deps, and libfabric comes from Debian's libfabric1
#     (1.17 on bookworm; Intel MPI 2021.19 runs its tcp;ofi_rxm provider).
#   - nothing to fix in the layout: mpiexec.hydra finds hydra_bstrap_proxy
#     and hydra_pmi_proxy beside itself and starts them by absolute path on
#     the other hosts, so every host (pod) needs the install at the same path;
#     the network-namespace pods of the tests share this one.
#   - I_MPI_ROOT=<venv> and <venv>/bin on PATH are all a run needs (mpicc
#     links with an rpath to <venv>/lib); I_MPI_FABRICS=shm:ofi and
#     FI_PROVIDER=tcp pick libfabric's TCP provider between hosts, and on a
#     host with several interfaces FI_TCP_IFACE names the one to use (the
#     launcher sets it).
#
# Root for the default cache (or PODMPI_INTELMPI_CACHE elsewhere); needs
# python3 with venv and pip (python3-venv, python3-pip) and PyPI. One build
# at a time (flock on <cache>.lock), in place. Exit status 0 when the cache
# is ready, 1 with one line saying why otherwise.
set -euo pipefail
mode=full
case "${1:-}" in
--wheels) mode=wheels ;;
"") ;;
*) echo "usage: $0 [--wheels]" >&2; exit 64 ;;
esac
# The versions are images/intelmpi.Dockerfile's (its ARG defaults), so that
# the tests run what the image ships.
dockerfile="$(cd "$(dirname "$0")/.." && pwd)/images/intelmpi.Dockerfile"
arg() { sed -n "s/^ARG $1=//p" "$dockerfile"; }
version=${PODMPI_INTELMPI_VERSION:-$(arg INTEL_MPI_VERSION)}
mpi4py_version=${PODMPI_MPI4PY_VERSION:-$(arg MPI4PY_VERSION)}
if [ -z "$version" ] || [ -z "$mpi4py_version" ]; then
  echo "intelmpi: no ARG INTEL_MPI_VERSION/MPI4PY_VERSION in $dockerfile"; exit 1
fi
dest=${PODMPI_INTELMPI_CACHE:-/var/cache/podmpi/intelmpi-$version}
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-/var/cache/podmpi/pip}
python=${PODMPI_PYTHON:-/usr/bin/python3}
name="Intel MPI $version"

wheels_ready() {
  ls "$1"/wheels/impi_rt-"$version"-*.whl "$1"/wheels/impi_devel-"$version"-*.whl \
    "$1"/wheels/mpi4py-"$mpi4py_version"-*.whl >/dev/null 2>&1
}
ready() {
  [ -x "$1/venv/bin/mpiexec.hydra" ] && [ -x "$1/venv/bin/hydra_bstrap_proxy" ] && [ -x "$1/venv/bin/mpicc" ] &&
    [ -e "$1/venv/lib/libmpi.so.12" ] && [ -d "$1/venv/lib/python3"*/site-packages/mpi4py-"$mpi4py_version".dist-info ] &&
    wheels_ready "$1"
}
done_() {
  echo "$name: $1"
  if [ "$mode" = wheels ]; then echo "$dest/wheels"; fi
  exit 0
}
if [ "$mode" = wheels ] && wheels_ready "$dest"; then
  done_ "wheels cached in $dest/wheels"
fi
if ready "$dest"; then
  done_ "cached in $dest"
fi
mkdir -p "$(dirname "$dest")" "$PIP_CACHE_DIR" || { echo "$name: cannot create $(dirname "$dest") (root?)"; exit 1; }
if [ "$mode" = full ]; then
  "$python" -m venv --help >/dev/null 2>&1 || { echo "$name: $python has no venv module (apt-get install -y python3-venv python3-pip)"; exit 1; }
fi
"$python" -m pip --version >/dev/null 2>&1 || { echo "$name: $python has no pip (apt-get install -y python3-pip)"; exit 1; }
# Another build of the same cache (CI's, a make target's) finishes first;
# this one then finds it ready.
exec 9>"$dest.lock"
flock -w 900 9 || { echo "$name: $dest.lock still held after 900 s"; exit 1; }
if [ "$mode" = wheels ] && wheels_ready "$dest"; then
  done_ "wheels cached in $dest/wheels (fetched by another run meanwhile)"
fi
if ready "$dest"; then
  done_ "cached in $dest (built by another run meanwhile)"
fi
log="$dest.log"
start=$(date +%s)
: >"$log"
run() {
  "$@" >>"$log" 2>&1 || { echo "$name: $* failed; tail of $log:"; tail -20 "$log"; exit 1; }
}
# Each part is made in place under the lock and checked before use: the
# wheels in a folder renamed when complete, the venv anew whenever it is
# not ready() (a venv names its own folder in its scripts, so it is not
# built elsewhere and moved).
mkdir -p "$dest"
if ! wheels_ready "$dest"; then
  echo "$name: pip download into $dest/wheels (about 130 MB; log $log)"
  rm -rf "$dest/wheels" "$dest/wheels.tmp"
  mkdir -p "$dest/wheels.tmp"
  # The wheels this machine's python installs (manylinux_2_28, cp3X for
  # mpi4py): binaries only, no dependencies (see "libfabric" above).
  run "$python" -m pip download --disable-pip-version-check --no-deps --only-binary=:all: -d "$dest/wheels.tmp" \
    "impi-rt==$version" "impi-devel==$version" "mpi4py==$mpi4py_version"
  mv "$dest/wheels.tmp" "$dest/wheels"
  chmod -R a+rX "$dest/wheels"
fi
if [ "$mode" = wheels ]; then
  done_ "wheels fetched into $dest/wheels in $(($(date +%s) - start)) s"
fi
echo "$name: install into $dest/venv (log $log)"
rm -rf "$dest/venv"
run "$python" -m venv "$dest/venv"
run "$dest/venv/bin/pip" install --disable-pip-version-check --no-deps --no-index "$dest"/wheels/*.whl
chmod -R a+rX "$dest"
ready "$dest" || { echo "$name: installed, but something is missing in $dest; see $log"; exit 1; }
echo "$name: ready in $dest after $(($(date +%s) - start)) s ($("$dest/venv/bin/mpirun" -V 2>/dev/null | head -1 || echo version unknown))"
