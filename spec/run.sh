#!/usr/bin/env bash
# run.sh checks the model with spin: spec/README.md says what each run
# covers.
#
#   spec/run.sh          (make spec)       the safety configurations, searched
#                                          exhaustively, then every mutant
#   spec/run.sh full     (make spec-full)  the larger configuration
#   spec/run.sh mutants                    the mutants only
#   spec/run.sh rate                       the rate model only (rate.pml):
#                                          its configurations and mutants
#   spec/run.sh live     (make spec-live)  the liveness claims under weak
#                                          fairness
#
# A safety run fails when spin finds a violation, when the search is not
# complete (memory, depth) or when it is not exhaustive. A mutant fails
# when spin finds no counterexample. For each refuted mutant the end of
# its counterexample, replayed with spin -t, is written to
# spec/trails/<mutant>.txt. Build outputs go to spec/work/ (not committed).
set -euo pipefail
cd "$(dirname "$0")"

command -v spin >/dev/null || { echo "run.sh: spin is not installed (apt-get install spin)" >&2; exit 1; }
command -v "${CC:-cc}" >/dev/null || { echo "run.sh: no C compiler (${CC:-cc})" >&2; exit 1; }
CC=${CC:-cc}
MEMLIM=${MEMLIM:-12000}   # MB for pan's state store

# The base of every configuration: two node ids, l_local and the
# operator's max at 1, one report of a node id in the network at a time
# (lost or delivered late), no duplicates. Each configuration turns on
# the behaviour it checks (config.pml has every switch).
BASE="-DNN=2 -DLLO=1 -DLHI=1 -DOPMAX=1 -DOPTOGGLE=0 -DNREP=1 -DDUP=0 -DDSLACK=0
	-DTTL=3 -DMARGIN=1 -DBOUND=2 -DDRIFT=0
	-DCRASH=0 -DSTOP=0 -DDRAIN=0 -DEVICT=0 -DFMAX=0"

# Safety configurations: name and -D flags.
# default: clocks that drift and freeze, leases that lapse, the fence,
#          requests that outlive the lease (the node's clock stands still).
# drain:   drain and undrain across lapses.
# The rate model (rate.pml): two node ids, the key's rate R = 3 (two
# nodes with demand tie: one is targeted 2, the other 1, either way), rate
# demand 0..1, leases of 2 ticks, margin 1, clocks that
# drift by 1 and stand still, one report of a node id in the network at a
# time, heartbeats that issue a generation for the concurrency share only.
# rate:        Stop and leave, crash, restart as a new instance; R fixed.
# rate-change: the operator moves R within 1..3 (no Stop, no crash).
# rate-failover: crash and restart (no Stop), and failovers to a replica
#              that lost rows, each followed by learning mode (the
#              RateApplied cap).
RBASE="-DNN=2 -DRINIT=3 -DDMAX=1 -DTTL=2 -DMARGIN=1 -DDRIFT=1 -DNREP=1 -DCGEN=1"
declare -A CONF=(
	[default]="$BASE -DDRIFT=1"
	[drain]="$BASE -DDRAIN=1"
	[full]="$BASE -DDRIFT=1 -DDRAIN=1"
	[rate]="$RBASE -DSTOP=1 -DCRASH=1"
	[rate-change]="$RBASE -DSTOP=0 -DCRASH=0 -DRCHANGE=1 -DRLO=1 -DRHI=3"
	[rate-failover]="$RBASE -DSTOP=0 -DCRASH=1 -DFAILOVER=1"
)
SAFETY=(default drain rate rate-change rate-failover)
RATESAFETY=(rate rate-change rate-failover)
# The model file of each configuration and mutant (default fleet.pml).
declare -A MODEL=([rate]=rate.pml [rate-change]=rate.pml [rate-failover]=rate.pml [MUT_RATE_EAGER]=rate.pml
	[MUT_RATE_HOLD_NONE]=rate.pml [MUT_RATE_STALE_APPLIED]=rate.pml [MUT_RATE_LEARN_SHORT]=rate.pml)
# Extra pan compile flags: the full configuration's 49 million states do
# not fit in 12 GB even compressed losslessly (-DCOLLAPSE), so they are
# stored as hash-compacted signatures (-DHC4, about 4.5 GB): no bitstate
# hashing, but not strictly exhaustive either — a state whose signature
# collides with a stored one is not explored (docs/design.md §16).
declare -A CCONF=([full]="-DHC4")

# Mutants: the weaker rule (coord.pml, fleet.pml), the configuration it is
# searched in, and the search depth bound (a bounded depth-first search
# finds a short counterexample quickly; a mutant only needs one).
MUTANTS=(MUT_NO_HOLD MUT_TIMER_FENCE MUT_EVICT_REJOIN MUT_ROW_DRAIN MUT_NO_EPOCH MUT_ACKED_RESERVE
	MUT_LEAVE_SHORTENS MUT_DELETE_HELD MUT_DELETE_LEARN MUT_RATE_EAGER MUT_RATE_HOLD_NONE MUT_RATE_STALE_APPLIED
	MUT_RATE_LEARN_SHORT)
RATEMUTANTS=(MUT_RATE_EAGER MUT_RATE_HOLD_NONE MUT_RATE_STALE_APPLIED MUT_RATE_LEARN_SHORT)
declare -A MCONF=(
	[MUT_NO_HOLD]="$BASE -DDRIFT=1"
	[MUT_TIMER_FENCE]="$BASE -DDRIFT=1"
	[MUT_EVICT_REJOIN]="$BASE -DEVICT=1"
	[MUT_ROW_DRAIN]="$BASE -DDRAIN=1"
	[MUT_NO_EPOCH]="$BASE -DFMAX=1 -DKEYLOSS=0 -DLAGMAX=2"
	[MUT_ACKED_RESERVE]="$BASE -DDRAIN=1"
	[MUT_LEAVE_SHORTENS]="$BASE -DSTOP=1 -DDRIFT=1"
	[MUT_DELETE_HELD]="$BASE -DSTOP=1 -DDELKEY=1"
	[MUT_DELETE_LEARN]="$BASE -DFMAX=1 -DKEYLOSS=0 -DLAGMAX=2 -DDELKEY=1"
	[MUT_RATE_EAGER]="$RBASE -DSTOP=1 -DCRASH=1 -DNOLEMMA"
	[MUT_RATE_HOLD_NONE]="$RBASE -DSTOP=1 -DCRASH=1 -DNOLEMMA"
	[MUT_RATE_STALE_APPLIED]="$RBASE -DSTOP=0 -DCRASH=1 -DFAILOVER=1 -DNOLEMMA"
	[MUT_RATE_LEARN_SHORT]="$RBASE -DSTOP=0 -DCRASH=1 -DFAILOVER=1 -DNOLEMMA"
)
declare -A MDEPTH=(
	[MUT_NO_HOLD]=10000
	[MUT_TIMER_FENCE]=10000
	[MUT_EVICT_REJOIN]=10000
	[MUT_ROW_DRAIN]=10000
	[MUT_NO_EPOCH]=200
	[MUT_ACKED_RESERVE]=20000
	[MUT_LEAVE_SHORTENS]=10000
	[MUT_DELETE_HELD]=40
	[MUT_DELETE_LEARN]=40
	[MUT_RATE_EAGER]=40
	[MUT_RATE_HOLD_NONE]=40
	[MUT_RATE_STALE_APPLIED]=36
	[MUT_RATE_LEARN_SHORT]=36
)
# The rate mutants' and the delete mutants' searches look for a
# counterexample within their depth (compiled with -DREACH, which makes a
# depth-bounded search complete; the first two also shorten it, pan -i,
# which takes minutes for the failover's); -DNOLEMMA above leaves the
# per-node lemma out of the rate mutants, so that the counterexample is
# one of the sum.
declare -A MPAN=([MUT_RATE_EAGER]="-i" [MUT_RATE_HOLD_NONE]="-i")
declare -A MCC=([MUT_DELETE_HELD]="-DREACH" [MUT_DELETE_LEARN]="-DREACH" [MUT_RATE_EAGER]="-DREACH" [MUT_RATE_HOLD_NONE]="-DREACH" [MUT_RATE_STALE_APPLIED]="-DREACH" [MUT_RATE_LEARN_SHORT]="-DREACH")
declare -A MDESC=(
	[MUT_NO_HOLD]="(a) the lease covers admissions only: a row's reserve ends with its lease"
	[MUT_TIMER_FENCE]="(b) the fence is checked only by a timer, which may fire late"
	[MUT_EVICT_REJOIN]="(c) an evicted instance whose row has gone joins afresh (no table evictions)"
	[MUT_ROW_DRAIN]="(d) drain stored only on the live row: a lapse forgets it"
	[MUT_NO_EPOCH]="(e) no new epoch after the database lost state"
	[MUT_ACKED_RESERVE]="(f) the reserve is the acknowledged share only"
	[MUT_LEAVE_SHORTENS]="(g) a departure's hold replaces the row's, and no padding for clock rates"
	[MUT_DELETE_HELD]="(k) delete_key refuses only while the key has members: rows holding their reserve go with it"
	[MUT_DELETE_LEARN]="(l) delete_key reads the rows as they are after a loss: no refusal while the incarnation differs or the key learns"
	[MUT_RATE_EAGER]="(h) the rate reserve is the granted rate share only (no RateHigh)"
	[MUT_RATE_HOLD_NONE]="(i) no fence margin for the rate: a node paces to its lease end on its own clock"
	[MUT_RATE_STALE_APPLIED]="(j) a fenced node reports its last grant's rate share as applied (learning mode)"
	[MUT_RATE_LEARN_SHORT]="(m) learning mode caps the rate shares for a tick less than the lease"
)

# Liveness (-DLIVE, fleet.pml's ltl claims), under weak fairness, after
# the last fault (GST): name, -D flags and the claim. Two node ids with
# l_local 2 (L_global >= the nodes with demand), leases of 2 ticks, a
# request bound of 1; losses, lapses and late replies before GST. (A fall
# configuration in which the operator sets and removes a max of 1 before
# GST does not finish within 15 GB: see docs/design.md §16.)
# share-evicted shows that the claim can fail: the operator may evict node
# 0 too (LIVE_ANYOPER), and an evicted node id never admits again, so spin
# must find a fair cycle.
LBASE="-DLIVE -DNN=2 -DOPTOGGLE=0 -DNREP=1 -DDUP=0 -DDSLACK=0 -DTTL=2 -DMARGIN=1 -DBOUND=1
	-DDRIFT=0 -DCRASH=0 -DSTOP=0 -DDRAIN=0 -DEVICT=0 -DFMAX=0"
LIVE=(share partition fall share-evicted)
declare -A LCONF=(
	[share]="$LBASE -DLLO=2 -DLHI=2 -DOPMAX=2"
	[partition]="$LBASE -DLLO=2 -DLHI=2 -DOPMAX=2"
	[fall]="$LBASE -DLLO=2 -DLHI=2 -DOPMAX=2"
	[share-evicted]="${LBASE/-DEVICT=0/-DEVICT=1} -DLIVE_ANYOPER -DLLO=2 -DLHI=2 -DOPMAX=2"
)
declare -A LCLAIM=([share]=share [partition]=partition [fall]=fall [share-evicted]=share)
declare -A LEXPECT=([share]=pass [partition]=pass [fall]=pass [share-evicted]=violated)

failed=0

# search NAME FLAGS DEPTH [CFLAGS [PANFLAGS]]: compiles and runs pan on
# MODEL[NAME] (fleet.pml) in work/NAME; the result is in work/NAME/pan.out.
search() {
	local name=$1 flags=$2 depth=$3 cflags=${4:-} panflags=${5:-} dir=work/$1 model=${MODEL[$1]:-fleet.pml}
	rm -rf "$dir"
	mkdir -p "$dir"
	cp ./*.pml "$dir"/
	# shellcheck disable=SC2086
	(cd "$dir" && spin -a $flags "$model" >spin.out 2>&1) || { cat "$dir/spin.out"; return 1; }
	(cd "$dir" && $CC -O2 -w -DSAFETY -DMEMLIM="$MEMLIM" $cflags -o pan pan.c) || return 1
	# shellcheck disable=SC2086
	(cd "$dir" && ./pan -m"$depth" -w26 -c1 $panflags >pan.out 2>&1) || true
}

# stat FILE WHAT: a number from pan's report.
stat() {
	case $2 in
	states) awk '/states, stored/ {print $1; exit}' "$1" ;;
	depth) sed -n 's/.*depth reached \([0-9]*\).*/\1/p' "$1" | head -1 ;;
	errors) sed -n 's/.*errors: \([0-9]*\).*/\1/p' "$1" | head -1 ;;
	time) sed -n 's/^pan: elapsed time \([0-9.e+]*\).*/\1/p' "$1" | head -1 ;;
	esac
}

report() {
	printf '%-20s %-9s states %10s   depth %8s   time %7s s\n' "$1" "$2" \
		"$(stat "$3" states)" "$(stat "$3" depth)" "$(stat "$3" time)"
}

safety() {
	local name=$1 out=work/$1/pan.out verdict=pass
	search "$name" "${CONF[$name]}" 10000000 "${CCONF[$name]:-}" || { echo "$name: build failed"; failed=1; return; }
	if [ "$(stat "$out" errors)" != 0 ]; then
		verdict=FAIL
		grep -m3 -E 'assertion violated|VIOLATION|invalid end state' "$out" || true
		echo "   replay: cd spec/work/$name && spin -t -p $(echo ${CONF[$name]}) ${MODEL[$name]:-fleet.pml}"
	elif grep -q -e 'Search not completed' -e 'max search depth too small' -e 'out of memory' "$out"; then
		verdict=FAIL
		echo "$name: the search did not complete (see spec/work/$name/pan.out)"
	fi
	report "$name" "$verdict" "$out"
	[ "$verdict" = pass ] || failed=1
}

mutant() {
	local m=$1 out=work/$1/pan.out flags model=${MODEL[$1]:-fleet.pml}
	flags="-D$m -DNOSYM ${MCONF[$m]}"
	search "$m" "$flags" "${MDEPTH[$m]}" "${MCC[$m]:-}" "${MPAN[$m]:-}" || { echo "$m: build failed"; failed=1; return; }
	if [ "$(stat "$out" errors)" = 0 ]; then
		report "$m" "NOT REFUTED" "$out"
		failed=1
		return
	fi
	report "$m" refuted "$out"
	mkdir -p trails
	# shellcheck disable=SC2086
	{
		echo "# ${MDESC[$m]}"
		echo "# spin -a -D$m -DNOSYM $(echo ${MCONF[$m]}) $model; pan -m${MDEPTH[$m]}${MPAN[$m]:+ ${MPAN[$m]}}"
		echo "# $(grep -m1 -E 'assertion violated' "$out")"
		(cd "work/$m" && spin -t $flags "$model" >replay.out 2>&1) || true
		echo "# $(grep -m1 'trail ends after' "work/$m/replay.out")"
		if [ "$model" = rate.pml ]; then
			echo "# The last steps (spin -t; t is the time in ticks; seqs are renamed by rank, and a"
			echo "# generation is 1 when it is the row's newest, 0 when older: see rate.pml, normalize):"
		else
			echo "# The last steps (spin -t; t is the time in ticks; seqs, instances, epochs and generations"
			echo "# are renamed by rank, see compress.pml):"
		fi
		sed -n 's/^ *\(\(VIOLATION \)\{0,1\}t=[0-9].*\)$/\1/p' "work/$m/replay.out" |
			grep -v ' ---- tick$' | tail -n 25
	} >"trails/$m.txt"
}

# live NAME: checks LCLAIM[NAME] in LCONF[NAME] for acceptance cycles under
# weak fairness; fails unless the result is LEXPECT[NAME].
live() {
	local name=live-$1 out=work/live-$1/pan.out verdict=pass dir=work/live-$1
	rm -rf "$dir"
	mkdir -p "$dir"
	cp ./*.pml "$dir"/
	# shellcheck disable=SC2086
	(cd "$dir" && spin -a ${LCONF[$1]} fleet.pml >spin.out 2>&1) || { cat "$dir/spin.out"; failed=1; return; }
	(cd "$dir" && $CC -O2 -w -DNFAIR=3 -DCOLLAPSE -DMEMLIM="$MEMLIM" -o pan pan.c) || { failed=1; return; }
	(cd "$dir" && ./pan -a -f -N "${LCLAIM[$1]}" -m2000000 -w24 >pan.out 2>&1) || true
	if [ "$(stat "$out" errors)" != 0 ]; then
		verdict=violated
	elif grep -q -e 'Search not completed' -e 'max search depth too small' -e 'out of memory' "$out"; then
		verdict=incomplete
	fi
	if [ "$verdict" = "${LEXPECT[$1]}" ]; then
		report "$name" "$verdict" "$out"
	else
		report "$name" "$verdict (want ${LEXPECT[$1]})" "$out"
		failed=1
	fi
}

mode=${1:-spec}
kind="pan -DSAFETY" search="exhaustive (no bitstate)"
[ "$mode" = live ] && kind="pan -a -f (acceptance cycles, weak fairness)"
[ "$mode" = full ] && search="hash-compacted states (-DHC4, no bitstate; see CCONF)"
echo "spin $(spin -V | sed -n 's/^Spin Version \([^ ]*\).*/\1/p'), $kind, $search, MEMLIM=${MEMLIM} MB; time = pan's search time"
case $mode in
spec)
	for c in "${SAFETY[@]}"; do safety "$c"; done
	for m in "${MUTANTS[@]}"; do mutant "$m"; done
	;;
full) safety full ;;
mutants) for m in "${MUTANTS[@]}"; do mutant "$m"; done ;;
rate)
	for c in "${RATESAFETY[@]}"; do safety "$c"; done
	for m in "${RATEMUTANTS[@]}"; do mutant "$m"; done
	;;
live) for c in "${LIVE[@]}"; do live "$c"; done ;;
*) echo "usage: spec/run.sh [spec|full|mutants|rate|live]" >&2; exit 2 ;;
esac
if [ "$failed" != 0 ]; then
	echo "spec: FAILED"
	exit 1
fi
echo "spec: ok"
