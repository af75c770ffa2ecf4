# Shared by scripts/demo.sh and scripts/bench.sh (sourced, not run).
# Every function takes the calling script's name for its messages.

# require_root_and_go NAME WHAT: exit with one line unless root with Go.
require_root_and_go() {
  if [ "$(id -u)" -ne 0 ]; then
    echo "$1: needs root ($2); run: sudo make $1"
    exit 1
  fi
  if ! command -v go >/dev/null; then
    echo "$1: needs Go (https://go.dev/dl/) in PATH or /usr/local/go/bin"
    exit 1
  fi
}

# install_missing NAME PKG...: apt-get install the Debian packages that are
# not installed yet, and only those.
install_missing() {
  local name=$1 pkg
  shift
  local need=()
  for pkg in "$@"; do
    dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || need+=("$pkg")
  done
  [ "${#need[@]}" -eq 0 ] && return 0
  if ! command -v apt-get >/dev/null; then
    echo "$name: missing packages ${need[*]} and no apt-get to install them"
    exit 1
  fi
  echo "== apt-get install ${need[*]}"
  DEBIAN_FRONTEND=noninteractive apt-get update -qq >/dev/null
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null
}
