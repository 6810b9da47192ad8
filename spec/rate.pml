/*
 * rate.pml: the rate-share handoff (fleet-wide requests or tokens per
 * minute, shared through the same heartbeat as the concurrency shares),
 * checked by spin: `make spec` runs it (spec/run.sh, configurations rate
 * and rate-change, and its two mutants). A model of its own, smaller than
 * fleet.pml, with the same abstractions and constants (config.pml): time
 * in ticks, one coordinator step per atomic transaction, node clocks that
 * drift and stand still, the fence deadline with its margin, sequential
 * heartbeats that time out within a tick, and a network that loses,
 * delays and reorders reports and loses replies and departures.
 *
 * The rule (coord.State.rateGrant, coord.NodeState.RateReserve and their
 * SQL twins), for one dimension (requests and tokens are the same rule,
 * each on its own):
 *
 *   - each row carries rs (RateShare, the newest granted rate share) and rh
 *     (RateHigh, the largest rate share granted since the heartbeat that
 *     acknowledged the node's grant, that one included);
 *   - a grant carries a generation; a new one is issued whenever the
 *     concurrency share or the rate share changes; a report whose applied
 *     generation is >= the row's acknowledges the grant: rh := rs;
 *   - the rate reserve of a row is max(rh, rs) while its lease runs (on the
 *     database's clock) and it has not departed, 0 after;
 *   - a heartbeat of a node with rate demand d > 0 computes its target,
 *     its part of R split by demand among the members with demand (self
 *     included) by largest remainder (coord.apportion: ⌊R·d/D⌋ for D the
 *     summed demand, plus one of the units left over when fewer of those
 *     come first by remainder R·d mod D descending, ties by node id), and
 *     grants rs = max(0, min(target, R − Σ rate reserve of the other
 *     rows)); without demand, 0. The order of tied remainders, by node
 *     id, is not symmetric in node ids; the model lets each heartbeat
 *     break a tie either way (TIE), which includes the order by node id.
 *
 * A node paces to the rate share of the newest grant it applied, at once,
 * while its fence deadline (send time + lease remaining − margin, on its
 * own clock) has not passed; it enforces 0 when fenced, stopping or down.
 *
 * Properties (checked after every step that can raise a node's rate or
 * lower the bound; a violation prints VIOLATION):
 *   - Σ over node ids of the rate each enforces <= R at every instant;
 *     when the operator moves R (RCHANGE), <= the largest R the database
 *     held during the last lease (WINR = TTL ticks);
 *   - the lemma: a node that enforces a rate e > 0 has a row, of its
 *     instance, whose lease runs and whose rate reserve is >= e.
 *
 * FAILOVER 1 adds failovers to a replica that lost rows, at any time, as
 * many as may be: any non-empty set of the rows is gone (their newest
 * grants with them; a row the replica has is as the primary left it), and
 * the key is in learning mode for LEARNT ticks from then, the lease: the
 * least that covers every grant of the old primary, and what the
 * coordinator caps rate shares for (coord.KeyState.rateLearning: the
 * longest lease from the key's epoch, which the loss moved to its
 * discovery, no sooner than the failover modelled here; the concurrency
 * shares learn for the request bound too).
 * While learning, a grant is also at most what the node reports it paces
 * to (Report.RateApplied): its rate share while its fence deadline runs,
 * 0 once fenced or stopping (fleet.Node.report). The lemma is checked
 * outside learning mode only: a lost row reserves nothing, and the nodes
 * it covered keep pacing until their fence deadlines.
 *
 * Left out, and why: a rate is spent when a request is sent, so requests
 * in flight, the request bound and holds (fleet.pml) play no part: the
 * rate reserve ends at the lease end. The concurrency share appears only
 * through the generations it issues (CGEN). Drain and eviction are
 * fleet.pml's (for the rate rule, a drained node id is one without demand,
 * an evicted row one whose lease is never renewed). A failover restores
 * rows as they were or not at all, never an older version of a row: an
 * older version reserves no less than none.
 * A new instance starts once its node id has no message of the instance
 * before in the network (a late report of a dead instance can only renew
 * a row nobody paces to, which reserves more, not less).
 *
 * Mutants:
 *   MUT_RATE_EAGER      the rate reserve is rs only: a lowered share is
 *                       granted elsewhere before the node acknowledged it;
 *   MUT_RATE_HOLD_NONE  the node paces to its lease end on its own clock,
 *                       with no fence margin: a clock that stands still
 *                       outlives the reserve, which ends with the lease on
 *                       the database's clock;
 *   MUT_RATE_STALE_APPLIED  (FAILOVER) a fenced node reports the rate share
 *                       of its last grant as applied: in learning mode the
 *                       coordinator grants it again, next to the share the
 *                       lost row had let another node take.
 *   MUT_RATE_LEARN_SHORT  (FAILOVER) learning mode caps the rate shares for
 *                       a tick less than the lease: a node whose clock
 *                       stands still still paces to a grant the failover
 *                       lost when its share is granted to the other node.
 */

#include "config.pml"

/* ------------------------------------------------------------ constants */

/* The key's rate R (units per minute, in units of its smallest split):
 * fixed at RINIT, or moved by the operator within [RLO, RHI] when RCHANGE
 * is 1. */
#ifndef RINIT
#define RINIT 2
#endif
#ifndef RCHANGE
#define RCHANGE 0
#endif
#if RCHANGE
#ifndef RLO
#define RLO 1
#endif
#ifndef RHI
#define RHI 3
#endif
#else
#undef RLO
#undef RHI
#define RLO RINIT
#define RHI RINIT
#endif

/* A report's rate demand: 0..DMAX (at most 3). */
#ifndef DMAX
#define DMAX 2
#endif

/* CGEN 1: a heartbeat may issue a new generation although the rate share
 * did not change (the concurrency share did). */
#ifndef CGEN
#define CGEN 1
#endif

/* FAILOVER 1: failovers that lose rows, each followed by learning mode for
 * LEARNT ticks (NN 2 only). */
#ifndef FAILOVER
#define FAILOVER 0
#endif
#ifndef LEARNT
#ifdef MUT_RATE_LEARN_SHORT
#define LEARNT (TTL - 1)
#else
#define LEARNT TTL
#endif
#endif
#if FAILOVER && NN != 2
#error FAILOVER needs NN 2
#endif

/* The window of the property when R changes: the lease. */
#ifndef WINR
#define WINR TTL
#endif

/* The node's fence margin for its rate: MUT_RATE_HOLD_NONE has none. */
#ifdef MUT_RATE_HOLD_NONE
#define RMARGIN 0
#else
#define RMARGIN MARGIN
#endif

#define MAX2(a, b) ((a) > (b) -> (a) : (b))
#define MIN2(a, b) ((a) < (b) -> (a) : (b))

/* ---------------------------------------------------------------- state */

/* Node phases: DOWN (no process), RUN (paces its requests to its rate
 * share: 0 before its first grant), STOPPING (has called Stop: sends
 * nothing more, heartbeats with demand 0 until it leaves). */
#define DOWN     0
#define RUN      1
#define STOPPING 2

/* Answers of the coordinator. */
#define G_OK    1
#define G_STALE 2
#define G_INUSE 3

#define WV 3   /* seqs and generations, renamed (see normalize) */
#define WR 3   /* rates, 0..7 */
#define WT 3   /* ticks, 0..7 */

/* A node row (table fleetlimit.nodes), one per node id: a new instance
 * takes its node id's row over once the row is no member (the row of the
 * instance before may still hold capacity for its requests, but its rate
 * reserve has ended with its lease or its departure). */
typedef RRow {
	bit used;
	bit inst;                /* instance */
	bit dep;                 /* departed */
	unsigned seq : WV;
	unsigned dem : 2;        /* rate demand of the newest report */
	unsigned rs : WR;        /* RateShare */
	unsigned rh : WR;        /* RateHigh */
	unsigned gen : WV;       /* GrantedGen */
	unsigned lease : WT;     /* ticks until lease_expires_at; 0: expired */
};

/* A report in the network. */
typedef RRep {
	bit used;
	bit aw;                  /* the node waits for its reply */
	bit inst;
	unsigned seq : WV;
	unsigned dem : 2;        /* rate demand */
	unsigned ag : WV;        /* AppliedGen */
#if FAILOVER
	unsigned ap : WR;        /* RateApplied */
#endif
};

typedef RNode {
	unsigned phase : 2;
	bit inst;                /* the running instance */
	bit pend;                /* a heartbeat call is under way (one at a time) */
	unsigned rs : WR;        /* the rate share it paces to (its newest grant's; 0
	                          * once fenced or stopping, when it no longer counts) */
	unsigned ag : WV;        /* the newest generation applied */
	unsigned dl : WT;        /* node-clock ticks until the fence deadline; 0: past it */
	unsigned off : 2;        /* clock offset, 0..DRIFT */
	RRep rep[NREP];          /* its reports in the network */
	bit gok;                 /* a grant replying to its call, in the network ... */
	unsigned grs : WR;       /* ... with this rate share ... */
	unsigned ggen : WV;      /* ... and generation (and lease remaining TTL) */
	bit lv;                  /* a departure in the network ... */
	bit linst;               /* ... of this instance */
#ifdef MUT_RATE_STALE_APPLIED
	unsigned lrs : WR;       /* the rate share of its last grant, fenced or not */
#endif
};

RRow row[NN];
RNode nd[NN];
unsigned rate : WR;          /* the key's rate R */
#if FAILOVER
unsigned learn : WT;         /* ticks of learning mode left */
#endif

/* Ghost: ticks since R was last >= v (WINR+1: not within the window). */
byte rAge[RHI+1];

/* Scratch: not part of the state. */
hidden int T;                /* absolute time, for traces */
hidden byte hk, hj, hq, hv, hw;
hidden int hx, hy, hz, hpres, hsumd, htarget;
hidden byte hkind, hshare, hgen, hfound;
hidden byte pres[8];
hidden byte rk[8];
hidden int hm;
hidden byte nm[NN];          /* each node id slot's original name (symmetry) */

#define UP(i)      (nd[i].phase != DOWN)
#define FREEREP(i) (!nd[i].rep[NREP-1].used)
#define NOREP(i)   (!nd[i].rep[0].used)

/* ----------------------------------------------------- the coordinator */

#define RMEMBER(r) (r.used && r.lease > 0 && !r.dep)
/* coord.NodeState.RateReserve. */
#define RRESERVE(r) (RMEMBER(r) -> MAX2(r.rh, r.rs) : 0)
#ifdef MUT_RATE_EAGER
/* The reserve is the granted rate share only. */
#define RRES(r) (RMEMBER(r) -> r.rs : 0)
#else
#define RRES(r) RRESERVE(r)
#endif

/* ratePath: the heartbeat's main path for report J of node id I, whose
 * row has taken over (hfound 0: a fresh row); BUMP 1: the concurrency
 * share changed, so a new generation whatever the rate share. */
inline ratePath(I, J, BUMP, TIE) {
	/* takeReport, and the acknowledgement. */
	row[I].seq = nd[I].rep[J].seq;
	row[I].dem = nd[I].rep[J].dem;
	if
	:: hfound && nd[I].rep[J].ag >= row[I].gen -> row[I].rh = row[I].rs
	:: else
	fi;
	row[I].lease = TTL;
	/* The other rows: their rate reserves; the members' demand. */
	hpres = 0; hsumd = 0;
	for (hk : 0 .. NN-1) {
		if
		:: hk != I ->
			hpres = hpres + RRES(row[hk]);
			if
			:: RMEMBER(row[hk]) -> hsumd = hsumd + row[hk].dem
			:: else
			fi
		:: else
		fi
	};
	/* Target: all of R split by demand by largest remainder (hy: self's
	 * remainder; hz: the units left over; hj: the members with demand
	 * that come first, a tied one when TIE is 0); then the cap. */
	htarget = 0;
	if
	:: row[I].dem > 0 ->
		hsumd = hsumd + row[I].dem;
		hy = rate * row[I].dem % hsumd;
		hz = rate - rate * row[I].dem / hsumd;
		hj = 0;
		for (hk : 0 .. NN-1) {
			if
			:: hk != I && RMEMBER(row[hk]) && row[hk].dem > 0 ->
				hz = hz - rate * row[hk].dem / hsumd;
				if
				:: rate * row[hk].dem % hsumd > hy || rate * row[hk].dem % hsumd == hy && !(TIE) -> hj++
				:: else
				fi
			:: else
			fi
		};
		htarget = rate * row[I].dem / hsumd + (hj < hz -> 1 : 0)
	:: else
	fi;
	hx = MAX2(0, MIN2(htarget, rate - hpres));
#if FAILOVER
	if
	:: learn > 0 -> hx = MIN2(hx, nd[I].rep[J].ap)
	:: else
	fi;
#endif
	if
	:: !hfound || hx != row[I].rs || BUMP ->
		/* A generation later than every one of the node id (only they
		 * are ever compared with it). */
		hv = MAX2(nd[I].ag, nd[I].ggen);
		hv = MAX2(hv, row[I].gen);
		for (hk : 0 .. NREP-1) { hv = MAX2(hv, nd[I].rep[hk].ag) };
		row[I].gen = hv + 1;
		row[I].rs = hx;
		row[I].rh = MAX2(row[I].rh, hx)
	:: else
	fi;
	hkind = G_OK; hshare = row[I].rs; hgen = row[I].gen
}

/* rateHeartbeat: the transaction for report J of node id I; the answer in
 * hkind, hshare, hgen. */
inline rateHeartbeat(I, J, BUMP, TIE) {
	if
	:: row[I].used && row[I].inst == nd[I].rep[J].inst ->
		if
		:: nd[I].rep[J].seq <= row[I].seq || row[I].dep ->
			hkind = G_STALE; hshare = row[I].rs; hgen = row[I].gen
		:: else ->
			hfound = 1;
			ratePath(I, J, BUMP, TIE)
		fi
	:: RMEMBER(row[I]) && row[I].inst != nd[I].rep[J].inst ->
		/* ErrNodeIDInUse: the instance before is a member. */
		hkind = G_INUSE; hshare = 0; hgen = 0
	:: else ->
		/* A fresh row. */
		hfound = 0;
		row[I].used = 1; row[I].inst = nd[I].rep[J].inst; row[I].dep = 0;
		row[I].rs = 0; row[I].rh = 0; row[I].gen = 0;
		ratePath(I, J, BUMP, TIE)
	fi
}

/* rateLeave (coord.State.Leave): the row departs, its lease ends now. */
inline rateLeave(I) {
	if
	:: row[I].used && row[I].inst == nd[I].linst ->
		row[I].dep = 1; row[I].lease = 0
	:: else
	fi
}

/* ------------------------------------------------------- the properties */

#define ENF(i) ((nd[i].phase == RUN && nd[i].dl > 0) -> nd[i].rs : 0)
#if NN == 2
#define SUMENF (ENF(0) + ENF(1))
#else
#define SUMENF (ENF(0) + ENF(1) + ENF(2))
#endif

/* noteR: R is rate from now on. */
inline noteR() {
	for (hk : 1 .. RHI) {
		if
		:: hk <= rate -> rAge[hk] = 0
		:: else
		fi
	}
}

#if FAILOVER
#define LEMMAON (learn == 0)
#else
#define LEMMAON true
#endif

inline check() {
	hy = 0;
	for (hk : 1 .. RHI) {
		if
		:: rAge[hk] <= WINR -> hy = hk
		:: else
		fi
	};
	hx = SUMENF;
	if
	:: hx > hy ->
		printf("VIOLATION t=%d: the nodes pace to rates adding up to %d > R %d (the largest R of the last %d ticks)\n",
			T, hx, hy, WINR);
		assert(false)
	:: else
	fi;
#ifndef NOLEMMA
	for (hj : 0 .. NN-1) {
		if
		:: LEMMAON && ENF(hj) > 0 && !(row[hj].used && row[hj].inst == nd[hj].inst && RRESERVE(row[hj]) >= ENF(hj)) ->
			printf("VIOLATION t=%d: n%d paces to rate %d above its row's rate reserve\n", T, nm[hj], ENF(hj));
			assert(false)
		:: else
		fi
	};
#endif
	skip
}

/* ------------------------------------------------------ canonical form */

/* normalize renames what the rules only compare, and clears what no rule
 * reads any more, so that the state space is finite and small:
 *   - generations are only compared with the node id's row (ag >= gen),
 *     and every value but the row's is at most the row's; a new one is
 *     larger than all: so each value is 1 when it equals the row's
 *     generation and 0 when older (0 is none, also older);
 *   - seqs are compared only between the node id's reports and its row: a
 *     report whose seq is at most the row's is stale for good (its content
 *     no longer matters); the rest are ranked above the row's seq;
 *   - a row that is no member keeps no demand (its next report sets it),
 *     a departed row nothing but its instance;
 *   - the reports of a node id are a bag, kept sorted;
 *   - node ids are interchangeable: their data is kept sorted (symmetry;
 *     off with NOSYM, which the mutants' searches use so that their trails
 *     replay without renaming). */
#define MARK(x) pres[x] = 1; hm = MAX2(hm, x);
#define REMAP(x) x = rk[x];
#if FAILOVER
#define REPF_AP(OP, i, a, b) OP(i, a, b, ap)
#else
#define REPF_AP(OP, i, a, b)
#endif
#define REPF(OP, i, a, b) OP(i, a, b, used) OP(i, a, b, aw) OP(i, a, b, inst) OP(i, a, b, seq) \
	OP(i, a, b, dem) OP(i, a, b, ag) REPF_AP(OP, i, a, b)
#define SWAPREP(i, a, b, f) hx = nd[i].rep[a].f; nd[i].rep[a].f = nd[i].rep[b].f; nd[i].rep[b].f = hx;
#define CLEARREP(i, a, b, f) nd[i].rep[a].f = 0;
#define CMPREP(i, a, b, f) if :: hv == 0 && nd[i].rep[a].f < nd[i].rep[b].f -> hv = 1 \
	:: hv == 0 && nd[i].rep[a].f > nd[i].rep[b].f -> hv = 2 :: else fi;
#define STALEREP(i, j) (row[i].used && row[i].inst == nd[i].rep[j].inst && \
	(nd[i].rep[j].seq <= row[i].seq || row[i].dep))

/* No process runs row i's instance and no report of it is in the network. */
#if NREP == 1
#define REPOF(i, x) (nd[i].rep[0].used && nd[i].rep[0].inst == (x))
#else
#define REPOF(i, x) (nd[i].rep[0].used && nd[i].rep[0].inst == (x) || nd[i].rep[1].used && nd[i].rep[1].inst == (x))
#endif
#define DEADROW(i) (!(UP(i) && nd[i].inst == row[i].inst) && !REPOF(i, row[i].inst))

#define CMPX(x, y) if :: hv == 0 && x < y -> hv = 1 :: hv == 0 && x > y -> hv = 2 :: else fi;
#define SWPX(x, y) hx = x; x = y; y = hx;
#if FAILOVER
#define PAIR_AP(OP, a, b) OP(nd[a].rep[hw].ap, nd[b].rep[hw].ap)
#else
#define PAIR_AP(OP, a, b)
#endif
#ifdef MUT_RATE_STALE_APPLIED
#define PAIR_LRS(OP, a, b) OP(nd[a].lrs, nd[b].lrs)
#else
#define PAIR_LRS(OP, a, b)
#endif
#define NODE_PAIRS(OP, a, b) \
	OP(nd[a].phase, nd[b].phase) OP(nd[a].inst, nd[b].inst) OP(nd[a].pend, nd[b].pend) \
	OP(nd[a].rs, nd[b].rs) OP(nd[a].ag, nd[b].ag) OP(nd[a].dl, nd[b].dl) OP(nd[a].off, nd[b].off) \
	OP(nd[a].gok, nd[b].gok) OP(nd[a].grs, nd[b].grs) OP(nd[a].ggen, nd[b].ggen) \
	OP(nd[a].lv, nd[b].lv) OP(nd[a].linst, nd[b].linst) PAIR_LRS(OP, a, b) \
	OP(row[a].used, row[b].used) OP(row[a].inst, row[b].inst) OP(row[a].dep, row[b].dep) \
	OP(row[a].seq, row[b].seq) OP(row[a].dem, row[b].dem) OP(row[a].rs, row[b].rs) \
	OP(row[a].rh, row[b].rh) OP(row[a].gen, row[b].gen) OP(row[a].lease, row[b].lease) \
	for (hw : 0 .. NREP-1) { \
		OP(nd[a].rep[hw].used, nd[b].rep[hw].used) OP(nd[a].rep[hw].aw, nd[b].rep[hw].aw) \
		OP(nd[a].rep[hw].inst, nd[b].rep[hw].inst) OP(nd[a].rep[hw].seq, nd[b].rep[hw].seq) \
		OP(nd[a].rep[hw].dem, nd[b].rep[hw].dem) OP(nd[a].rep[hw].ag, nd[b].rep[hw].ag) PAIR_AP(OP, a, b) skip };

inline symSort2(a, b) {
	hv = 0;
	NODE_PAIRS(CMPX, a, b)
	if
	:: hv == 2 ->
		NODE_PAIRS(SWPX, a, b)
		hx = nm[a]; nm[a] = nm[b]; nm[b] = hx
	:: else
	fi
}

#define GENOF(x) x = ((row[hq].gen != 0 && x == row[hq].gen) -> 1 : 0);

#if FAILOVER
#define CLEARAP(i, j) nd[i].rep[j].ap = 0
#else
#define CLEARAP(i, j) skip
#endif

inline normalize() {
	for (hq : 0 .. NN-1) {
		/* Rows. */
		if
		:: row[hq].used && DEADROW(hq) && (row[hq].dep || row[hq].lease == 0) ->
			/* Nobody can report on it and it reserves nothing: as good
			 * as no row (the next instance's report makes a fresh one). */
			row[hq].used = 0; row[hq].inst = 0; row[hq].dep = 0; row[hq].lease = 0;
			row[hq].seq = 0; row[hq].dem = 0; row[hq].rs = 0; row[hq].rh = 0; row[hq].gen = 0
		:: row[hq].used && DEADROW(hq) && !(row[hq].dep || row[hq].lease == 0) ->
			/* It reserves until its lease ends; nothing reads its seq or
			 * generation any more. */
			row[hq].seq = 0; row[hq].gen = 0
		:: row[hq].used && !DEADROW(hq) && row[hq].dep ->
			row[hq].seq = 0; row[hq].dem = 0; row[hq].rs = 0; row[hq].rh = 0; row[hq].gen = 0
		:: row[hq].used && !DEADROW(hq) && !row[hq].dep && row[hq].lease == 0 -> row[hq].dem = 0
		:: else
		fi;
		/* The clock of a node without a process matters from its next
		 * start on, when it may gain a tick at once. */
		if
		:: nd[hq].phase == DOWN -> nd[hq].off = 0
		:: else
		fi;
		/* Generations. */
		GENOF(nd[hq].ag) GENOF(nd[hq].ggen)
		for (hj : 0 .. NREP-1) { GENOF(nd[hq].rep[hj].ag) skip };
		row[hq].gen = (row[hq].gen != 0 -> 1 : 0);
		/* Seqs: stale reports carry the row's seq and nothing else. */
		hm = row[hq].seq;
		pres[hm] = 1;
		for (hj : 0 .. NREP-1) {
			if
			:: nd[hq].rep[hj].used && STALEREP(hq, hj) ->
				nd[hq].rep[hj].seq = row[hq].seq; nd[hq].rep[hj].dem = 0; nd[hq].rep[hj].ag = 0;
				CLEARAP(hq, hj)
			:: else
			fi;
			MARK(nd[hq].rep[hj].seq)
		};
		rankBuild();
		REMAP(row[hq].seq)
		for (hj : 0 .. NREP-1) { REMAP(nd[hq].rep[hj].seq) skip };
		/* The bag of reports. */
		for (hw : 1 .. NREP-1) {
			for (hj : 0 .. NREP-2) {
				hv = 0;
				REPF(CMPREP, hq, hj, hj+1)
				if
				:: hv == 1 -> REPF(SWAPREP, hq, hj, hj+1) skip   /* used first, then descending */
				:: else
				fi
			}
		}
	};
#ifndef NOSYM
	symSort2(0, 1);
#if NN > 2
	symSort2(1, 2);
	symSort2(0, 1);
#endif
#endif
	skip
}

/* rankBuild: rk[v] = how many marked values lie in 1..v. */
inline rankBuild() {
	hz = 0;
	rk[0] = 0;
	for (hw : 1 .. hm) {
		hz = hz + pres[hw];
		rk[hw] = hz;
		pres[hw] = 0
	};
	pres[0] = 0
}

/* ------------------------------------------------------------- the node */

/* What a report carries as applied (Report.RateApplied): what the node
 * paces to, 0 once fenced or stopping; MUT_RATE_STALE_APPLIED: its last
 * grant's rate share, fenced or not. */
#ifdef MUT_RATE_STALE_APPLIED
#define APPLIED(i) nd[i].lrs
#else
#define APPLIED(i) ENF(i)
#endif

/* sendReport: a heartbeat with rate demand D; its seq is newer than every
 * seq of the node id. */
inline sendReport(I, D) {
	hv = row[I].seq;
	for (hk : 0 .. NREP-1) { hv = MAX2(hv, nd[I].rep[hk].seq) };
	nd[I].rep[NREP-1].used = 1;
	nd[I].rep[NREP-1].aw = 1;
	nd[I].rep[NREP-1].inst = nd[I].inst;
	nd[I].rep[NREP-1].seq = hv + 1;
	nd[I].rep[NREP-1].dem = D;
	nd[I].rep[NREP-1].ag = nd[I].ag;
#if FAILOVER
	nd[I].rep[NREP-1].ap = APPLIED(I);
#endif
	nd[I].pend = 1;
	printf("t=%d n%d i%d sends report seq %d: rate demand %d, applied gen %d\n",
		T, nm[I], nd[I].inst, hv + 1, D, nd[I].ag);
	normalize()
}

/* endCall: the call is over (a reply, or its timeout). */
inline endCall(I) {
	nd[I].pend = 0; nd[I].gok = 0; nd[I].grs = 0; nd[I].ggen = 0;
	for (hk : 0 .. NREP-1) { nd[I].rep[hk].aw = 0 }
}

#ifdef MUT_RATE_STALE_APPLIED
#define SETLRS(i) nd[i].lrs = nd[i].grs
#define CLEARLRS(i) nd[i].lrs = 0
#else
#define SETLRS(i) skip
#define CLEARLRS(i) skip
#endif

/* applyReply: the node paces to the granted rate share at once, until its
 * fence deadline: send time + lease remaining (TTL) − margin on its clock
 * (the reply comes within the tick of the send). A stopping node takes the
 * grant's generation only. */
inline applyReply(I) {
	if
	:: nd[I].phase == RUN ->
		nd[I].dl = MAX2(nd[I].dl, TTL - RMARGIN);
		nd[I].rs = nd[I].grs;
		SETLRS(I)
	:: else
	fi;
	nd[I].ag = nd[I].ggen;
	printf("t=%d n%d i%d applies the grant: rate share %d, fence deadline in %d ticks of its clock\n",
		T, nm[I], nd[I].inst, nd[I].grs, nd[I].dl);
	endCall(I);
#if NN == 2
	printf("t=%d   the nodes pace to: n%d %d, n%d %d (R %d)\n", T, nm[0], ENF(0), nm[1], ENF(1), rate);
#else
	printf("t=%d   the nodes pace to: n%d %d, n%d %d, n%d %d (R %d)\n", T, nm[0], ENF(0), nm[1], ENF(1),
		nm[2], ENF(2), rate);
#endif
	check();
	normalize()
}

/* advance: the node's clock moves one tick; a call times out within it. */
inline advance(I) {
	if
	:: nd[I].dl > 0 ->
		nd[I].dl--;
		if
		:: nd[I].dl == 0 -> nd[I].rs = 0   /* fenced */
		:: else
		fi
	:: else
	fi;
	if
	:: nd[I].pend ->
		printf("t=%d n%d i%d: heartbeat times out\n", T, nm[I], nd[I].inst);
		endCall(I)
	:: else
	fi
}

inline goDown(I) {
	nd[I].phase = DOWN; nd[I].inst = 0; nd[I].rs = 0; nd[I].ag = 0; nd[I].dl = 0;
	CLEARLRS(I);
	endCall(I)
}

#define SEND(D) :: d_step { UP(ME) && !nd[ME].pend && FREEREP(ME) && \
	(D == 0 || nd[ME].phase == RUN) -> sendReport(ME, D) }

#define ME me
proctype node(byte me) {
end:
	do
	/* Heartbeats, one call at a time, with any rate demand (0 once
	 * stopping). */
	SEND(0)
	SEND(1)
#if DMAX > 1
	SEND(2)
#endif
#if DMAX > 2
	SEND(3)
#endif
	:: d_step { nd[ME].gok -> applyReply(ME) }
	:: d_step { nd[ME].pend && !nd[ME].gok ->
		printf("t=%d n%d i%d: heartbeat times out\n", T, nm[ME], nd[ME].inst);
		endCall(ME);
		normalize() }
#if STOP
	/* Stop: it sends nothing more, heartbeats with demand 0, then leaves. */
	:: d_step { nd[ME].phase == RUN ->
		nd[ME].phase = STOPPING; nd[ME].rs = 0; nd[ME].dl = 0;
		printf("t=%d n%d i%d stops\n", T, nm[ME], nd[ME].inst);
		normalize() }
	:: d_step { nd[ME].phase == STOPPING && !nd[ME].pend && !nd[ME].lv ->
		nd[ME].lv = 1; nd[ME].linst = nd[ME].inst;
		printf("t=%d n%d i%d leaves\n", T, nm[ME], nd[ME].inst);
		goDown(ME);
		normalize() }
#endif
#if CRASH
	:: d_step { UP(ME) ->
		printf("t=%d n%d i%d crashes\n", T, nm[ME], nd[ME].inst);
		goDown(ME);
		normalize() }
#endif
#if STOP || CRASH
	/* A new instance, once no message of the one before is in the
	 * network; its token differs from its row's. */
	:: d_step { nd[ME].phase == DOWN && NOREP(ME) && !nd[ME].lv ->
		nd[ME].inst = (row[ME].used -> 1 - row[ME].inst : 0);
		nd[ME].phase = RUN;
		printf("t=%d n%d starts as instance i%d\n", T, nm[ME], nd[ME].inst);
		normalize() }
#endif
#if DRIFT > 0
	/* Its clock gains a tick on the database's. */
	:: d_step { nd[ME].off < DRIFT ->
		nd[ME].off++;
		advance(ME);
		printf("t=%d n%d: its clock gains a tick\n", T, nm[ME]);
		normalize() }
#endif
	od
}
#undef ME

/* ---------------------------------------------------------- the network */

/* handle: the database runs the heartbeat; the reply goes back if the node
 * still waits for it (a stale grant or ErrNodeIDInUse the node ignores: its
 * call just ends). */
inline handle(I, J, BUMP, TIE) {
	rateHeartbeat(I, J, BUMP, TIE);
	if
	:: hkind == G_INUSE ->
		printf("t=%d   db: n%d i%d seq %d refused: ErrNodeIDInUse\n", T, nm[I], nd[I].rep[J].inst, nd[I].rep[J].seq)
	:: else ->
		if
		:: hkind == G_STALE ->
			printf("t=%d   db: n%d i%d seq %d is stale: answered from the row\n", T, nm[I], nd[I].rep[J].inst, nd[I].rep[J].seq)
		:: else ->
			printf("t=%d   db: n%d i%d seq %d (demand %d, applied gen %d) -> rate share %d (R %d, gen %d)\n",
				T, nm[I], nd[I].rep[J].inst, nd[I].rep[J].seq, nd[I].rep[J].dem, nd[I].rep[J].ag, hshare, rate, hgen);
#if NN == 2
			printf("t=%d   db: rate reserves now n%d %d, n%d %d\n", T, nm[0], RRES(row[0]), nm[1], RRES(row[1]))
#else
			printf("t=%d   db: rate reserves now n%d %d, n%d %d, n%d %d\n", T, nm[0], RRES(row[0]), nm[1], RRES(row[1]),
				nm[2], RRES(row[2]))
#endif
		fi
	fi;
	if
	:: nd[I].rep[J].aw && hkind == G_OK -> nd[I].gok = 1; nd[I].grs = hshare; nd[I].ggen = hgen
	:: nd[I].rep[J].aw && hkind != G_OK -> endCall(I)
	:: else
	fi;
	REPF(CLEARREP, I, J, 0)
	normalize()
}

/* RIVAL(I, J): report J has demand and so has another member: a tie of
 * remainders may arise, and the heartbeat is also run with the tie
 * broken the other way (TIE 1: self first; with three node ids, self
 * first or last among those tied with it). */
#if NN == 2
#define RIVAL(I, J) (nd[I].rep[J].dem > 0 && RMEMBER(row[1-(I)]) && row[1-(I)].dem > 0)
#else
#define RIVAL(I, J) (nd[I].rep[J].dem > 0 && \
	(RMEMBER(row[((I)+1)%NN]) && row[((I)+1)%NN].dem > 0 || RMEMBER(row[((I)+2)%NN]) && row[((I)+2)%NN].dem > 0))
#endif
#if CGEN
#define BUMPACT(J) :: d_step { nd[ME].rep[J].used -> handle(ME, J, 1, 0) } \
	:: d_step { nd[ME].rep[J].used && RIVAL(ME, J) -> handle(ME, J, 1, 1) }
#else
#define BUMPACT(J)
#endif
#define REPACT(J) \
	:: d_step { nd[ME].rep[J].used -> handle(ME, J, 0, 0) } \
	:: d_step { nd[ME].rep[J].used && RIVAL(ME, J) -> handle(ME, J, 0, 1) } \
	BUMPACT(J) \
	:: d_step { nd[ME].rep[J].used -> \
		printf("t=%d net: report seq %d of n%d i%d is lost\n", T, nd[ME].rep[J].seq, nm[ME], nd[ME].rep[J].inst); \
		REPF(CLEARREP, ME, J, 0) \
		normalize() }

#define ME me
proctype net(byte me) {
end:
	do
	REPACT(0)
#if NREP > 1
	REPACT(1)
#endif
	:: d_step { nd[ME].gok ->
		printf("t=%d net: the reply to n%d is lost\n", T, nm[ME]);
		nd[ME].gok = 0; nd[ME].grs = 0; nd[ME].ggen = 0;
		normalize() }
	:: d_step { nd[ME].lv ->
		rateLeave(ME);
		printf("t=%d   db: leave of n%d i%d\n", T, nm[ME], nd[ME].linst);
		nd[ME].lv = 0; nd[ME].linst = 0;
		normalize() }
	:: d_step { nd[ME].lv ->
		printf("t=%d net: the departure of n%d i%d is lost\n", T, nm[ME], nd[ME].linst);
		nd[ME].lv = 0; nd[ME].linst = 0;
		normalize() }
	od
}
#undef ME

/* --------------------------------------------------------- the operator */

#if RCHANGE
proctype oper() {
end:
	do
	:: d_step { rate < RHI -> rate++; noteR(); printf("t=%d operator raises R to %d\n", T, rate) }
	:: d_step { rate > RLO -> rate--; printf("t=%d operator lowers R to %d\n", T, rate) }
	od
}
#endif

/* --------------------------------------------------------- the failover */

#if FAILOVER
/* loseRow: the replica never had row I (or its instance's newest version
 * is older than any it had: as good as none for the reserve). */
inline loseRow(I) {
	row[I].used = 0; row[I].inst = 0; row[I].dep = 0; row[I].lease = 0;
	row[I].seq = 0; row[I].dem = 0; row[I].rs = 0; row[I].rh = 0; row[I].gen = 0
}

#define FAILOVER_TO(L0, L1) :: d_step { \
	learn = LEARNT; \
	if :: L0 -> loseRow(0) :: else fi; \
	if :: L1 -> loseRow(1) :: else fi; \
	printf("t=%d failover: rows lost n%d %d, n%d %d; learning mode for %d ticks\n", T, nm[0], L0, nm[1], L1, LEARNT); \
	check(); \
	normalize() }

proctype failover() {
end:
	do
	FAILOVER_TO(1, 0)
	FAILOVER_TO(0, 1)
	FAILOVER_TO(1, 1)
	od
}
#endif

/* ----------------------------------------------------------------- time */

#define STALLOK(i, M) (((M) >> (i)) & 1 -> nd[i].off > 0 : true)
#if NN == 2
#define TICKOK(M) (STALLOK(0, M) && STALLOK(1, M))
#else
#define TICKOK(M) (STALLOK(0, M) && STALLOK(1, M) && STALLOK(2, M))
#endif

/* tick: the database's clock moves one tick, and each node's but those in
 * M, whose clocks stand still (they lose a tick). */
inline tick(M) {
	T++;
	for (hk : 0 .. NN-1) {
		if
		:: row[hk].lease > 0 -> row[hk].lease--
		:: else
		fi
	};
	for (hj : 0 .. NN-1) {
		if
		:: ((M) >> hj) & 1 -> nd[hj].off--
		:: else -> advance(hj)
		fi
	};
	for (hk : 1 .. RHI) {
		if
		:: rAge[hk] <= WINR -> rAge[hk]++
		:: else
		fi
	};
#if FAILOVER
	if
	:: learn > 0 -> learn--
	:: else
	fi;
#endif
	noteR();
	if
	:: M == 0 -> printf("t=%d ---- tick\n", T)
	:: else -> printf("t=%d ---- tick (clocks standing still: mask %d)\n", T, M)
	fi;
	check();
	normalize()
}

#define TICK(M) :: d_step { TICKOK(M) -> tick(M) }

proctype clock() {
end:
	do
	TICK(0)
#if DRIFT > 0
	TICK(1)
	TICK(2)
	TICK(3)
#if NN > 2
	TICK(4)
	TICK(5)
	TICK(6)
	TICK(7)
#endif
#endif
	od
}

init {
	d_step {
		rate = RINIT;
		for (hk : 1 .. RHI) { rAge[hk] = WINR+1 };
		noteR();
		for (hk : 0 .. NN-1) {
			nd[hk].phase = RUN;
			nm[hk] = hk
		};
		printf("rate model: %d node ids, R %d (%d..%d), lease %d, margin %d, drift %d\n",
			NN, RINIT, RLO, RHI, TTL, RMARGIN, DRIFT)
	};
	atomic {
		run clock();
#if RCHANGE
		run oper();
#endif
#if FAILOVER
		run failover();
#endif
		run node(0); run net(0);
		run node(1); run net(1);
#if NN > 2
		run node(2); run net(2);
#endif
		skip
	}
}
