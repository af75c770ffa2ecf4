#!/usr/bin/env bash
# Builds (once) PyPI's Horovod against Debian's PyTorch and Open MPI, for the
# Horovod end-to-end tests (test/e2e), the Horovod image
# (images/horovod.Dockerfile) and its cluster test. PyPI serves Horovod only
# as source, and its compile costs about 8 CPU-minutes (18-33 minutes wall
# on a busy 2-core machine), so the wheel is cached, keyed by everything the
# compiled code depends on:
#
#   scripts/horovod-wheel.sh             the wheel and a venv with it, each built
#                                        unless cached; the last line printed is
#                                        the venv
#   scripts/horovod-wheel.sh --print     the venv's path only; nothing is built
#                                        (exit 1 when there is no key: python3-torch
#                                        or Open MPI not installed)
#   scripts/horovod-wheel.sh --venv DIR  the wheel, built unless cached, installed
#                                        into a new venv DIR (the image's /opt/venv)
#
# The cache, under ${PODMPI_HOROVOD_CACHE:-/var/cache/podmpi/horovod}:
#
#   wheels/<key>/horovod-<v>-cp3X-cp3X-linux_<arch>.whl   the wheel
#   wheels/<key>/key          what the key is made of, one per line (written
#                             last: a folder without it is an unfinished build)
#   wheels/<key>/check-build  horovodrun --check-build of it
#   wheels/<key>/*.whl, deps  Horovod's dependencies from PyPI (cloudpickle,
#                             psutil, pyyaml, packaging, cffi, pycparser) and
#                             their list: venvs install from this folder only
#   venvs/<key>/              a python3 venv (--system-site-packages, so that
#                             Debian's torch imports) with the wheel and its
#                             dependencies:
#                             bin/horovodrun, python3 -c 'import horovod.torch'
#   <key>.log, <key>.lock     the build's log and lock (outside wheels/, which
#                             the image build copies in whole)
#
#   <key> = horovod<v>-torch<python3-torch's Debian version>-py<X.Y>-
#           ompi<libopenmpi3's Debian version>-<os><release>-<arch>-<flags>
#
# <flags> says what is compiled in: pytorch-mpi-gloo. Any change (a Debian
# point release that rebuilds torch or Open MPI, another Python, another
# release) is another key, so a wheel is never installed beside a library it
# was not built against. Old keys stay until removed by hand (rm -rf). The
# image build copies wheels/ in (images/build.sh) and runs this script there
# with its own versions: a wheel of another key is not used, it compiles.
#
# Needs root for the default cache (and to apt-get install what is missing:
# python3-torch libtorch-dev pybind11-dev python3-dev python3-venv cmake g++
# make libopenmpi-dev), and PyPI (the sdist and Horovod's dependencies; pip's
# cache is ${PIP_CACHE_DIR:-/var/cache/podmpi/pip}). The compile runs at nice
# 10 with MAKEFLAGS=-j2 (PODMPI_HOROVOD_NICE, MAKEFLAGS override them).
# Callers that race (CI's background build, make image-test, the e2e test,
# another engineer) take turns on <key>.lock: the second waits, then
# finds the wheel built. Exit status 0 when ready, 1 with a line saying why.
set -euo pipefail
cd "$(dirname "$0")/.."
. scripts/lib.sh
version=${PODMPI_HOROVOD_VERSION:-0.28.1}
root=${PODMPI_HOROVOD_CACHE:-/var/cache/podmpi/horovod}
export PIP_CACHE_DIR=${PIP_CACHE_DIR:-/var/cache/podmpi/pip}
# Debian's python3: torch is Debian's, so it must be the python that imports
# it (a pyenv or /usr/local python first on PATH does not).
python=/usr/bin/python3
name="horovod $version"

# What the key reads (and a venv needs), and what only the compile needs.
key_deps=(python3 python3-venv python3-torch libopenmpi3 openmpi-bin)
build_deps=(libtorch-dev pybind11-dev python3-dev cmake g++ make libopenmpi-dev)
# What is compiled in. Gloo is Horovod's own collective library (bundled in
# the sdist): elastic horovodrun needs it. MPI and PyTorch are what the
# project runs; TensorFlow and MXNet are not installed.
build_env=(HOROVOD_WITH_PYTORCH=1 HOROVOD_WITH_MPI=1 HOROVOD_WITH_GLOO=1
  HOROVOD_WITHOUT_TENSORFLOW=1 HOROVOD_WITHOUT_MXNET=1)
flags=pytorch-mpi-gloo
# Horovod's runtime dependencies (its install_requires; cffi for PyTorch).
# setup.py imports them while it builds, so the build venv has them too.
py_deps=(cloudpickle psutil pyyaml packaging cffi)

mode=default venv=
case "${1:-}" in
--print) mode=print ;;
--venv)
  mode=venv venv=${2:-}
  [ -n "$venv" ] || { echo "usage: $0 [--print | --venv DIR]" >&2; exit 64; }
  ;;
"") ;;
*) echo "usage: $0 [--print | --venv DIR]" >&2; exit 64 ;;
esac

pkgver() { dpkg-query -W -f='${Version}' "$1" 2>/dev/null; }
key_of() {
  local torch ompi py rel
  torch=$(pkgver python3-torch) ompi=$(pkgver libopenmpi3)
  py=$("$python" -c 'import sys; print("%d.%d" % sys.version_info[:2])' 2>/dev/null || true)
  rel=$(. /etc/os-release 2>/dev/null && echo "${ID:-linux}${VERSION_ID:-}")
  [ -n "$torch" ] && [ -n "$ompi" ] && [ -n "$py" ] || return 1
  # '+' and '~' of Debian versions are fine in a file name; ':' (an epoch) is not.
  echo "horovod$version-torch$torch-py$py-ompi$ompi-$rel-$(uname -m)-$flags" | tr ':' '_'
}
wheel_ready() { [ -f "$wheels/key" ] && ls "$wheels"/horovod-"$version"-*.whl >/dev/null 2>&1; }
deps_ready() { [ -f "$wheels/deps" ]; }
venv_ready() { [ -x "$1/bin/horovodrun" ] && [ -f "$1/.podmpi-horovod-key" ] && [ "$(cat "$1/.podmpi-horovod-key")" = "$key" ]; }

if [ "$mode" = print ]; then
  key=$(key_of) || { echo "$name: no key: python3-torch, libopenmpi3 or $python is not installed"; exit 1; }
  echo "$root/venvs/$key"
  exit 0
fi
if ! key=$(key_of); then
  [ "$(id -u)" -eq 0 ] || { echo "$name: ${key_deps[*]} are not all installed, and installing them needs root"; exit 1; }
  install_missing horovod-wheel "${key_deps[@]}"
  key=$(key_of) || { echo "$name: ${key_deps[*]} installed, but no key from them"; exit 1; }
fi
wheels=$root/wheels/$key
[ "$mode" = venv ] || venv=$root/venvs/$key
if wheel_ready && deps_ready && venv_ready "$venv"; then
  echo "$name: cached in $wheels"
  echo "$venv"
  exit 0
fi
mkdir -p "$root/wheels" "$root/venvs" "$PIP_CACHE_DIR" || { echo "$name: cannot create $root (root?)"; exit 1; }
# python3-venv (ensurepip) and the rest of what a venv needs, when missing
# (the image's build stage has torch and Open MPI, so a key, but no venv).
if [ "$(id -u)" -eq 0 ]; then
  install_missing horovod-wheel "${key_deps[@]}"
fi
log="$root/$key.log"
# A cold build takes 18-33 minutes on a busy 2-core machine: the wait is
# bounded well above that.
exec 9>"$root/$key.lock"
if ! flock -n 9; then
  echo "$name: another build holds $root/$key.lock; waiting for it (up to 60 min; its log: $log)"
  flock -w 3600 9 || { echo "$name: $root/$key.lock still held after 60 min"; exit 1; }
fi
start=$(date +%s)
run() {
  "$@" >>"$log" 2>&1 || { echo "$name: $* failed after $(($(date +%s) - start)) s; tail of $log:"; tail -30 "$log"; exit 1; }
}
pip() { "$1/bin/pip" --disable-pip-version-check "${@:2}"; }

if ! wheel_ready; then
  install_missing horovod-wheel "${key_deps[@]}" "${build_deps[@]}"
  echo "$name: compiling into $wheels (about 8 CPU-minutes; log $log)"
  : >"$log"
  # Built in place under the lock; a build cut short leaves a folder
  # without its key file, which the next run clears.
  rm -rf "$wheels"
  mkdir -p "$wheels"
  build=$(mktemp -d "${TMPDIR:-/tmp}/podmpi-horovod-build.XXXXXX")
  trap 'rm -rf "$build"' EXIT
  run "$python" -m venv --system-site-packages "$build/venv"
  run pip "$build/venv" install wheel "${py_deps[@]}"
  run pip "$build/venv" download --no-deps --no-binary :all: -d "$build" "horovod==$version"
  # MAKEFLAGS=-j2: Horovod's CMake build runs make; more jobs than cores only
  # swap (one compile unit takes up to 1 GB).
  run env "${build_env[@]}" MAKEFLAGS="${MAKEFLAGS:--j2}" nice -n "${PODMPI_HOROVOD_NICE:-10}" \
    "$build/venv/bin/pip" --disable-pip-version-check wheel -v --no-build-isolation --no-deps \
    -w "$wheels" "$build/horovod-$version.tar.gz"
  rm -rf "$build"
  trap - EXIT
  {
    echo "key $key"
    echo "horovod $version"
    echo "python3-torch $(pkgver python3-torch)"
    echo "python $("$python" -c 'import sys; print(sys.version.split()[0])')"
    echo "libopenmpi3 $(pkgver libopenmpi3)"
    echo "os $(. /etc/os-release && echo "$PRETTY_NAME") ($(cat /etc/debian_version 2>/dev/null || echo -))"
    echo "g++ $(pkgver g++)"
    echo "build ${build_env[*]}"
  } >"$wheels/key.tmp"
  mv "$wheels/key.tmp" "$wheels/key"
  echo "$name: wheel compiled in $(($(date +%s) - start)) s"
fi

if ! venv_ready "$venv" || ! deps_ready; then
  if ! venv_ready "$venv"; then
    rm -rf "$venv"
    run "$python" -m venv --system-site-packages "$venv"
  fi
  if ! deps_ready; then
    # Horovod's dependencies as wheels beside it, so that a venv (the
    # image's too, which gets this folder) installs without PyPI.
    run pip "$venv" download --only-binary=:all: -d "$wheels" "${py_deps[@]}"
    (cd "$wheels" && ls -- *.whl | grep -v "^horovod-") >"$wheels/deps.tmp"
    mv "$wheels/deps.tmp" "$wheels/deps"
  fi
  if ! venv_ready "$venv"; then
    run pip "$venv" install --no-index --find-links "$wheels" "$wheels"/horovod-"$version"-*.whl
    # horovodrun lists what the library was built with; the key promises
    # PyTorch, MPI and Gloo.
    "$venv/bin/horovodrun" --check-build >"$venv/check-build" 2>>"$log" || true
    for f in PyTorch MPI Gloo; do
      grep -q "\[X\] $f" "$venv/check-build" ||
        { echo "$name: installed, but horovodrun --check-build does not list $f:"; cat "$venv/check-build"; exit 1; }
    done
    [ -f "$wheels/check-build" ] || cp "$venv/check-build" "$wheels/check-build"
    echo "$key" >"$venv/.podmpi-horovod-key"
  fi
  chmod -R a+rX "$venv" "$wheels"
fi
echo "$name: ready in $(($(date +%s) - start)) s: $venv"
echo "$venv"
