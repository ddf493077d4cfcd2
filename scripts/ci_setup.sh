#!/usr/bin/env bash
# Installs what the container runtime and remote host tests need and builds the runtime tests' base
# image's root filesystem; scripts/test runs it before pytest. Idempotent, and quick when everything
# is already there.
#
#   - Debian packages: the Docker engine, containerd, runc, the CNI plugins, debootstrap, chromium
#     for the dashboard's browser tests, and for the SSH hosts (tests/hosts/) the OpenSSH server and
#     client and iproute2.
#   - A Debian root filesystem (debootstrap minbase + Python, venv and pip) as a tarball under
#     .iris-test/images/, rebuilt only when what goes into it changes. No image registry is
#     reachable from the test machines, so tests/runtime/conftest.py `docker import`s it as the
#     base of every test image (and of containerd's pause image).
#
# Daemons are not started here: the test session starts its own dockerd, containerd and sshds on
# private sockets, ports and network namespaces and stops them when it ends. Under CI=true a step that cannot be done fails the
# run; elsewhere it prints why and the tests that need it fail or skip.
set -euo pipefail
cd "$(dirname "$0")/.."

STATE_DIR=.iris-test
IMAGES_DIR="$STATE_DIR/images"
BASE_TARBALL="$IMAGES_DIR/iris-test-base.tar"
BASE_KEY_FILE="$IMAGES_DIR/iris-test-base.key"
BASE_PACKAGES=python3,python3-venv,python3-pip

give_up() {
  echo "scripts/ci_setup.sh: $*" >&2
  if [ "${CI:-}" = "true" ]; then exit 1; fi
  echo "scripts/ci_setup.sh: continuing without it; the container runtime and remote host tests will not pass" >&2
  exit 0
}

as_root() {
  if [ "$(id -u)" = 0 ]; then "$@"; elif command -v sudo >/dev/null 2>&1; then sudo -n "$@"; else return 1; fi
}

missing=()
command -v dockerd >/dev/null 2>&1 || missing+=(docker.io)
command -v containerd >/dev/null 2>&1 || missing+=(containerd)
command -v runc >/dev/null 2>&1 || missing+=(runc)
[ -x /usr/lib/cni/loopback ] || missing+=(containernetworking-plugins)
# The dashboard's browser tests drive Debian's chromium through Playwright (never a downloaded browser).
[ -x /usr/bin/chromium ] || missing+=(chromium)
command -v debootstrap >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v debootstrap >/dev/null 2>&1 || missing+=(debootstrap)
[ -x /usr/sbin/sshd ] || missing+=(openssh-server)
command -v ssh >/dev/null 2>&1 || missing+=(openssh-client)
command -v ip >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v ip >/dev/null 2>&1 || missing+=(iproute2)
# The SSH test hosts firewall a port to show the CLI tunnelling to a controller it cannot reach.
command -v iptables >/dev/null 2>&1 || PATH="$PATH:/usr/sbin:/sbin" command -v iptables >/dev/null 2>&1 || missing+=(iptables)
if [ "${#missing[@]}" -gt 0 ]; then
  echo "scripts/ci_setup.sh: installing ${missing[*]}" >&2
  as_root apt-get update -q >/dev/null || give_up "apt-get update failed (are you root?)"
  as_root env DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null \
    || give_up "could not install ${missing[*]}"
fi

# The suite and mirror of this machine's own Debian, so the image matches the host's packages.
suite="$(. /etc/os-release && echo "${VERSION_CODENAME:-}")"
mirror=""
if [ -f /etc/apt/sources.list.d/debian.sources ]; then
  mirror="$(awk '$1 == "URIs:" { print $2; exit }' /etc/apt/sources.list.d/debian.sources)"
fi
if [ -z "$mirror" ] && [ -f /etc/apt/sources.list ]; then
  mirror="$(awk '$1 == "deb" && $0 !~ /security/ { print ($2 ~ /^\[/ ? $3 : $2); exit }' /etc/apt/sources.list)"
fi
[ -n "$suite" ] && [ -n "$mirror" ] || give_up "cannot tell this machine's Debian suite and mirror from /etc/os-release and apt's sources"

key="$(printf '%s\n' "$suite" "$BASE_PACKAGES" "minbase-v1" | sha256sum | cut -c1-16)"
if [ -s "$BASE_TARBALL" ] && [ "$(cat "$BASE_KEY_FILE" 2>/dev/null)" = "$key" ]; then
  exit 0
fi

echo "scripts/ci_setup.sh: building the test base root filesystem ($suite, $BASE_PACKAGES); takes about a minute" >&2
mkdir -p "$IMAGES_DIR"
rootfs="$(mktemp -d "$STATE_DIR/rootfs.XXXXXX")"
trap 'as_root rm -rf "$rootfs" "$BASE_TARBALL.tmp"' EXIT
as_root env PATH="$PATH:/usr/sbin:/sbin" debootstrap --variant=minbase --include="$BASE_PACKAGES" "$suite" "$rootfs" "$mirror" \
  >"$STATE_DIR/debootstrap.log" 2>&1 || give_up "debootstrap failed; see $STATE_DIR/debootstrap.log"
as_root tar -C "$rootfs" --exclude=./var/cache/apt/archives --exclude=./var/lib/apt/lists -cf "$BASE_TARBALL.tmp" . \
  || give_up "could not pack the root filesystem"
mv "$BASE_TARBALL.tmp" "$BASE_TARBALL"
echo "$key" >"$BASE_KEY_FILE"
