#!/usr/bin/env bash
# traces.sh writes spec/traces/traces.txt.gz: COUNT traces (default 1000)
# of spin's random simulation of the model, seeds 1..COUNT, for the
# trace-replay test (coord/spec_replay_test.go). Each trace is the
# coordinator's steps of one run (heartbeats with the grant the model
# computed, departures, operator actions, failovers), cut after STEPS of
# them (default 60). Odd seeds run 2 node ids, even seeds 3; every fifth
# starts with a key the operator created with a max.
#
# Usage: spec/traces.sh [COUNT [STEPS]]   (make spec-traces)
set -eu
cd "$(dirname "$0")"

count=${1:-1000}
steps=${2:-60}
command -v spin >/dev/null || { echo "traces.sh: spin is not installed (apt-get install spin)" >&2; exit 1; }

# Every feature on, wider ranges than the search: demand splits (LHI > NN),
# the operator's min and max, two failovers, keys created and deleted.
common="-DTRACE -DLLO=1 -DLHI=3 -DOPMAX=2 -DOPMIN=1 -DDSLACK=2 -DNREP=2 -DFMAX=2 -DLAGMAX=200
	-DCREATEKEY=1 -DDELKEY=1 -DRELEARN=1 -DTTL=3 -DBOUND=2 -DDRIFT=1"

tmp=$(mktemp)
trap 'rm -f "$tmp"' EXIT
{
	echo "# spin random simulation of spec/fleet.pml, written by spec/traces.sh $count $steps; do not edit."
	echo "# Each trace: 'trace SEED', then the model's coordinator steps (see coord/spec_replay_test.go)."
	for seed in $(seq 1 "$count"); do
		nn=$((2 + (seed + 1) % 2))
		opfix=$((seed % 5 == 0 ? 1 : 0))
		echo "trace $seed"
		# shellcheck disable=SC2086
		spin -T -n"$seed" -u200000 $common -DNN=$nn -DOPFIX=$opfix fleet.pml 2>/dev/null |
			awk -v max="$steps" '
				/^@@ config / { sub(/^@@ /, ""); print; next }
				/^@@ tick / { next }
				/^@@ / { sub(/^@@ /, ""); print; if (++n >= max) exit }'
	done
} >"$tmp"
mkdir -p traces
gzip -9 -n <"$tmp" >traces/traces.txt.gz
echo "spec/traces/traces.txt.gz: $count traces, $(grep -cv '^\(#\|trace \|config \)' "$tmp") coordinator steps"
