#!/bin/sh
# Install the Debian packages corral's build and tests need. Idempotent and quiet when nothing is
# missing; needs root (or sudo) only when something must be installed.
set -eu

PKGS="meson ninja-build pkg-config gcc libc6-dev make libevent-dev libjansson-dev \
libcurl4-openssl-dev libseccomp-dev libarchive-dev libssl-dev python3 curl iproute2 util-linux \
procps e2fsprogs docker-registry skopeo apache2-utils \
libmnl-dev libnftables-dev libnftnl-dev libnetfilter-log-dev nftables dnsmasq-base libldns-dev openssl strace"
# CI (CI=true) also builds the tree with clang (make clang, from scripts/test.sh).
[ "${CI:-}" = "true" ] && PKGS="$PKGS clang"

missing=""
for p in $PKGS; do
	if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
		missing="$missing $p"
	fi
done
[ -z "$missing" ] && exit 0

echo "bootstrap: installing:$missing" >&2
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -qq >/dev/null
# shellcheck disable=SC2086
$SUDO apt-get install -y -qq --no-install-recommends $missing >/dev/null
