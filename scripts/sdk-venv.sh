#!/usr/bin/env bash
# The Kubeflow Python SDK that make cluster-test drives (TestSDK in
# test/cluster/e2e): a venv with exactly the packages of
# test/cluster/e2e/testdata/sdk/requirements.txt, from PyPI, wheels only.
# Cached in ${PODMPI_SDK_CACHE:-/var/cache/podmpi}/kubeflow-sdk/<key>, where
# the key names the SDK's version, the Python's and the requirements file's
# hash, and built through scripts/cache-build.sh (one builder at a time; the
# venv is complete or absent). pip's own cache is
# ${PODMPI_SDK_CACHE}/pip, so a new key downloads only what changed.
#
#   scripts/sdk-venv.sh          prints the venv's python on its last line
#
# Python: PODMPI_SDK_PYTHON, default Debian's /usr/bin/python3 (3.11 on
# Debian 12; the SDK wants 3.10 or later), with its venv module (Debian
# package python3-venv). Needs PyPI the first time (about 25 MB, 20 s); a
# cached venv needs nothing.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
req=$root/test/cluster/e2e/testdata/sdk/requirements.txt
python=${PODMPI_SDK_PYTHON:-/usr/bin/python3}
cache=${PODMPI_SDK_CACHE:-/var/cache/podmpi}

if ! pyver=$("$python" -c 'import sys, venv, ensurepip; print("%d.%d" % sys.version_info[:2])' 2>/dev/null); then
  echo "sdk-venv: $python cannot make a venv with pip (apt-get install -y python3-venv, or set PODMPI_SDK_PYTHON)"
  exit 1
fi
sdk=$(sed -n 's/^kubeflow==//p' "$req")
key="kubeflow-$sdk-py$pyver-$(sha256sum "$req" | cut -c1-12)"
dest=$cache/kubeflow-sdk/$key
site="lib/python$pyver/site-packages"

# The build, run by cache-build.sh with the lock held: a venv in
# $PODMPI_CACHE_TMP, then its scripts' paths rewritten to where it will live
# (a venv's console scripts and activate name its folder; its python finds
# its packages from pyvenv.cfg next to it, wherever that is).
build() {
  local tmp=$PODMPI_CACHE_TMP
  "$python" -m venv "$tmp"
  "$tmp/bin/python" -m pip install --quiet --disable-pip-version-check --no-input \
    --cache-dir "$cache/pip" --only-binary=:all: --no-deps -r "$req"
  "$tmp/bin/python" -m pip check --disable-pip-version-check >/dev/null
  grep -rlF "$tmp" "$tmp/bin" | while IFS= read -r f; do
    sed -i "s|$tmp|$dest|g" "$f"
  done
}
export -f build
export python req cache dest
"$root/scripts/cache-build.sh" --name "Kubeflow SDK $sdk (Python $pyver)" --dest "$dest" --wait 900 \
  --check bin/python --check "$site/kubeflow/trainer/__init__.py" -- bash -c build >&2
echo "$dest/bin/python"
