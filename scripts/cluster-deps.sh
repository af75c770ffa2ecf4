#!/usr/bin/env bash
# Installs the Debian packages the single-node test cluster needs (make
# cluster-up, cluster-test): etcd, containerd + runc, the CNI plugins,
# podman (image builds), docker-compose (the compose example against
# podman's Docker-compatible API), iptables, gcc + libc6-dev (the static
# pause program), ipset (kube-router, the NetworkPolicy firewall),
# python3-venv (the Kubeflow Python SDK's venv, scripts/sdk-venv.sh), curl
# (make release reads what it pushed back from the registry). Only what is
# missing is installed.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=scripts/lib.sh
. "$here/lib.sh"
require_root_and_go cluster-up "network links, mounts and cgroups of the cluster"
install_missing cluster-up etcd-server containerd runc containernetworking-plugins podman \
  docker-compose golang-github-containernetworking-plugin-dnsname dnsmasq-base openssh-client \
  iptables ipset iproute2 gcc libc6-dev git ca-certificates python3-venv curl
