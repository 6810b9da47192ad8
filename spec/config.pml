/*
 * config.pml: the model's constants. Every one can be overridden with
 * spin -D (make spec passes the configurations of spec/run.sh). Time is in
 * ticks; the trace-replay test (coord/spec_replay_test.go) maps one tick to
 * one second.
 */

/* Node ids (processes that share the key): 2 or 3. */
#ifndef NN
#define NN 2
#endif

/* Row slots per node id: the instance that runs, and one older instance
 * whose row still holds (or is a tombstone). */
#ifndef RPN
#define RPN 2
#endif
#define NROWS (NN*RPN)

/* Reports of one node id in the network at once (any instance). */
#ifndef NREP
#define NREP 2
#endif

/* The lease (LeaseTTL), the fence margin (FenceMargin), the request bound
 * (MaxRequestDuration, B) and the clock drift: a node's clock reads the
 * database's time plus an offset in [0, DRIFT] that may change at any
 * tick, so over any interval it gains or loses at most DRIFT ticks. The
 * design requires DRIFT <= MARGIN (docs/design.md §11). */
#ifndef TTL
#define TTL 3
#endif
#ifndef MARGIN
#define MARGIN 1
#endif
#ifndef BOUND
#define BOUND 2
#endif
#ifndef DRIFT
#define DRIFT 1
#endif

/* The node asks the database to hold its capacity for its request bound
 * plus 0.1 %, for the drift of the clocks' rates over the bound
 * (fleet.Node.holdFor): HOLDPAD ticks here, as long as the drift. The
 * (g) mutant restores the rule before commit f2498da: no padding, and a
 * departure's hold replaces the row's. */
#ifndef HOLDPAD
#ifdef MUT_LEAVE_SHORTENS
#define HOLDPAD 0
#else
#define HOLDPAD DRIFT
#endif
#endif
#define REQHOLD (BOUND + HOLDPAD)

/* Evicted instances whose rows have gone that the database remembers
 * per node id (table evictions): the search forgets those that can never
 * report again (compress.pml), a trace keeps them all. */
#ifdef TRACE
#define EVN 8
#else
#define EVN 2
#endif

/* l_local ranges over [LLO, LHI]; every node starts at LINIT. */
#ifndef LLO
#define LLO 1
#endif
#ifndef LHI
#define LHI 2
#endif
#ifndef LINIT
#define LINIT LHI
#endif


/* The operator may set the key's max to OPMAX and remove it again
 * (0: never). OPMIN likewise for the min (0: never). */
#ifndef OPMAX
#define OPMAX 1
#endif
#ifndef OPMIN
#define OPMIN 0
#endif

/* The largest L_global: the operator's min may lift it above l_local. */
#if OPMIN > LHI
#define LCAP OPMIN
#else
#define LCAP LHI
#endif

/* A report's demand exceeds its in-flight by 0..DSLACK. */
#ifndef DSLACK
#define DSLACK 1
#endif

/* Failovers (the database losing its last commits), at most FMAX; until
 * the last one, the replica lags the primary by at most LAGMAX
 * generations (the search covers losses of up to LAGMAX grants). */
#ifndef FMAX
#define FMAX 1
#endif
#ifndef LAGMAX
#define LAGMAX 4
#endif
/* KEYLOSS 1: a failover may go back to before the key row existed (a key
 * created after the replica last caught up, a restore from before it).
 * 0 leaves that out of the search. */
#ifndef KEYLOSS
#define KEYLOSS 1
#endif

/* Feature switches: 0 leaves the behaviour out of the search. */
#ifndef CRASH
#define CRASH 1        /* crash, and restart as a new instance */
#endif
#ifndef STOP
#define STOP 1         /* graceful Stop and leave */
#endif
#ifndef DRAIN
#define DRAIN 1        /* operator drain and undrain */
#endif
#ifndef EVICT
#define EVICT 1        /* operator eviction */
#endif
#ifndef DUP
#define DUP 1          /* the network duplicates reports */
#endif
#ifndef CREATEKEY
#define CREATEKEY 0    /* the operator creates the key (with OPMAX) */
#endif
#ifndef DELKEY
#define DELKEY 0       /* the operator deletes the key (without force) */
#endif
#ifndef RELEARN
#define RELEARN 0      /* the operator runs relearn */
#endif
#ifndef OPFIX
#define OPFIX 0        /* the key starts created with max OPMAX */
#endif
#ifndef OPTOGGLE
#define OPTOGGLE 1     /* the operator sets and removes the max OPMAX */
#endif

/* The safety window of docs/design.md §12: while L_global falls, Σ
 * in-flight is bounded by the largest L_global of the last WIN ticks. */
#ifndef WIN
#define WIN (TTL+BOUND)
#endif

/* Largest value a compressed counter may take (rank arrays). */
#define MAXV 48
