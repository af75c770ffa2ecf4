#!/usr/bin/env bash
# Makes the job's SSH key for docker-compose.yaml in ./ssh, the way Kubeflow
# Trainer and mpi-operator lay out their Secret: id_rsa (an ECDSA P-521 key
# despite the name, SEC1 "EC PRIVATE KEY" PEM), id_rsa.pub and
# authorized_keys. Needs ssh-keygen (OpenSSH) on this machine; the images have
# no OpenSSH.
#
# The files are mode 0644: the containers run as an arbitrary UID that does
# not own them, and podmpi accepts a group- or world-readable key (it refuses
# a world-writable one). This is a throw-away key for a laptop; never reuse it.
set -euo pipefail
dir=$(cd "$(dirname "$0")" && pwd)/ssh
if [[ -f "$dir/id_rsa" && "${1:-}" != --force ]]; then
	echo "$dir/id_rsa exists; use --force to replace it" >&2
	exit 0
fi
mkdir -p "$dir"
rm -f "$dir/id_rsa" "$dir/id_rsa.pub" "$dir/authorized_keys"
command -v ssh-keygen >/dev/null 2>&1 ||
	{ echo "error: need ssh-keygen to make the key (apt-get install openssh-client)" >&2; exit 1; }
ssh-keygen -q -t ecdsa -b 521 -m PEM -N '' -C podmpi-compose -f "$dir/id_rsa"
cp "$dir/id_rsa.pub" "$dir/authorized_keys"
chmod 0755 "$dir"
chmod 0644 "$dir/id_rsa" "$dir/id_rsa.pub" "$dir/authorized_keys"
echo "wrote $dir/{id_rsa,id_rsa.pub,authorized_keys}"
