#!/usr/bin/env bash
# democratic-csi-sanity.sh: csi-sanity against democratic-csi's
# local-hostpath driver, directly and through proxy-topology (driver: csi),
# with the same skips; fails if the proxy adds a failure. The result tables
# (Markdown, the ones in docs/conformance.md) are printed and written to
# REPORT.
#
# usage: scripts/democratic-csi-sanity.sh DEMOCRATIC_CSI_SOURCE [REPORT]
#
# DEMOCRATIC_CSI_SOURCE is a democratic-csi source tree, e.g.
#   git clone https://github.com/democratic-csi/democratic-csi /tmp/democratic-csi
# or an archive of a mirror:
#   git --git-dir=<mirror> archive HEAD | tar -x -C /tmp/democratic-csi
# Its production dependencies are installed there when node_modules is
# missing (npm install --omit=dev, as its Dockerfile does). Needs root (the
# driver bind-mounts volumes), node, npm, rsync and go.
set -euo pipefail

usage() { sed -n 's/^# \{0,1\}//;2,16p' "$0" >&2; }

src=${1:-}
if [[ -z $src ]]; then
	echo "democratic-csi-sanity.sh: no democratic-csi source given" >&2
	usage
	exit 2
fi
if [[ ! -d $src ]]; then
	echo "democratic-csi-sanity.sh: $src does not exist: extract democratic-csi's source there first (see the usage)" >&2
	exit 2
fi
if [[ ! -f $src/bin/democratic-csi || ! -f $src/src/driver/controller-local-hostpath/index.js ]]; then
	echo "democratic-csi-sanity.sh: $src is not a democratic-csi source tree (no bin/democratic-csi or src/driver/controller-local-hostpath)" >&2
	exit 2
fi
for tool in node npm rsync go; do
	if ! command -v "$tool" >/dev/null; then
		echo "democratic-csi-sanity.sh: $tool is not installed (democratic-csi runs on node; its filecopy snapshots run rsync; the test is Go)" >&2
		exit 2
	fi
done
if [[ $(id -u) != 0 ]]; then
	echo "democratic-csi-sanity.sh: run as root: the driver bind-mounts volumes" >&2
	exit 2
fi

src=$(cd "$src" && pwd)
repo=$(cd "$(dirname "$0")/.." && pwd)
report=${2:-$repo/.run/democratic-csi.md}
mkdir -p "$(dirname "$report")"
report=$(cd "$(dirname "$report")" && pwd)/$(basename "$report")

if [[ ! -d $src/node_modules ]]; then
	echo "installing democratic-csi's production dependencies in $src (npm install --omit=dev)"
	(cd "$src" && npm install --omit=dev --no-audit --no-fund)
fi

rm -f "$report"
cd "$repo"
rc=0
DEMOCRATIC_CSI=$src DEMOCRATIC_CSI_REPORT=$report PROXY_TOPOLOGY_REQUIRE_ROOT=1 \
	go test -race -count=1 -timeout 15m -run '^TestSanityDemocraticCSI$' ./tests/sanity/ || rc=$?
if [[ -f $report ]]; then
	cat "$report"
	echo "(written to $report)"
fi
exit $rc
