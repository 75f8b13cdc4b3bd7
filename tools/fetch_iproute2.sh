#!/bin/bash
# Debian bookworm's iproute2 and the libraries its `ip` links (libbpf1, libelf1, libmnl0,
# libbsd0, libmd0, libcap2, zlib1g) as .deb files in DEST (default run/iproute2 of this
# checkout), for a machine with no `ip`: tools/two_nodes.sh unpacks them with `dpkg -x`
# into its state dir (never into /) and runs that `ip` with LD_LIBRARY_PATH set for it
# alone (TWO_NODES_IPROUTE2_DEBS=DEST there). Needs apt-get and a bookworm amd64 package
# list here; the `ip` of iproute2 6.1 needs glibc ≥ 2.34 (Ubuntu 22.04 and later).
#
# usage: tools/fetch_iproute2.sh [DEST]
set -euo pipefail
dest=$(realpath -m "${1:-$(dirname "$0")/../run/iproute2}")
mkdir -p "$dest" /tmp/amd64-lists/partial
o=(-oAPT::Architecture=amd64 -oAPT::Architectures=amd64 -oDir::State::Lists=/tmp/amd64-lists)
apt-get "${o[@]}" update > /dev/null
(cd "$dest" && apt-get "${o[@]}" download iproute2 libbpf1 libelf1 libmnl0 libbsd0 libmd0 libcap2 zlib1g)
ls -la "$dest"
du -sh "$dest"
