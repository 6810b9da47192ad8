/*
 * state.pml: the global state. Times are relative (ticks left), so states
 * that differ only by the absolute time are one state; the absolute time
 * is a hidden variable used only to print traces. Fields are bit fields:
 * WV bits for the renamed counters (seq, instance, epoch, generation),
 * WS bits for counts and ticks.
 */

/* Node phases (fleet.Node): DOWN has no process (crashed, stopped, or an
 * evicted node that left); NEW sends its first heartbeat (Start); RUN
 * admits; STOPPING has called Stop: it admits nothing and heartbeats until
 * it leaves. */
#define DOWN     0
#define NEW      1
#define RUN      2
#define STOPPING 3

/* Row statuses (coord.Status). */
#define ST_ACTIVE   0
#define ST_DRAINING 1
#define ST_EVICTED  2
#define ST_EXPIRED  3
#define ST_DEPARTED 4

/* What a node receives for its heartbeat. */
#define G_NONE    0
#define G_OK      1   /* a grant: active or draining */
#define G_STALE   2   /* Grant.Stale: ignored by the node */
#define G_EVICTED 3   /* Status evicted: the node fences itself for good */
#define G_INUSE   4   /* ErrNodeIDInUse */

/* Operator errors. */
#define E_OK      0
#define E_NODE    1   /* ErrUnknownNode */
#define E_KEY     2   /* ErrUnknownKey */
#define E_LIVE    3   /* ErrLiveNodes */
#define E_EXISTS  4   /* ErrKeyExists */
#define E_HELD    5   /* ErrHeldCapacity */
#define E_LEARN   6   /* ErrLearning */

#define NOSLOT 255

#define MAX2(a, b) ((a) > (b) -> (a) : (b))
#define MIN2(a, b) ((a) < (b) -> (a) : (b))

#ifdef TRACE
#define WV 8
#else
#define WV 6
#endif
#define WS 4

/* A node row (table fleetlimit.nodes): one instance of a node id. */
typedef Row {
	unsigned used : 2;       /* 0: free; 1: a row; 2: a row measuring (NodeState.Measuring) */
	bit dr;                  /* draining */
	bit ev;                  /* evicted */
	bit dep;                 /* departed */
	unsigned inst : WV;      /* instance */
	unsigned seq : WV;
	unsigned ll : WS;        /* l_local */
	unsigned inf : WS;       /* in-flight of the newest report */
	unsigned dem : WS;       /* demand */
	unsigned share : WS;
	unsigned ep : WV;        /* epoch of the grant */
	unsigned gen : WV;       /* granted generation */
	unsigned unack : WS;     /* unacked_high */
	unsigned lease : WS;     /* ticks until lease_expires_at; 0: expired */
	unsigned hold : WS;      /* ticks until hold_until; 0: the reserve has run out */
};

/* The key row, its drain marks and its node rows: the whole database. */
typedef Db {
	bit exists;              /* the key row exists */
	bit incRec;              /* the key has recorded an incarnation (its first check) */
	bit incStale;            /* ... and it is not the database's: a failover since */
	bit seen;                /* a heartbeat recorded the lease and request bound (max_*) */
	unsigned ep : WV;        /* epoch */
	unsigned gen : WV;       /* generation */
	unsigned lg : WS;        /* L_global of the newest heartbeat */
	unsigned learn : WS;     /* ticks of learning mode left */
	/* Table database_state, which no key owns: it outlives the key. */
	bit dbStale;             /* its incarnation is not the database's: a failover since */
	bit dbSeen;              /* a key has recorded a lease and request bound (max over the keys) */
	unsigned dbLearn : WS;   /* ticks of the database's learning mode left */
	unsigned opmax : WS;     /* operator max, 0: none */
	unsigned opmin : WS;     /* operator min, 0: none */
	bit drain[NN];           /* table drains */
	byte evi[NN*EVN];        /* table evictions: node id i's evicted instances in evi[i*EVN ..] */
	Row row[NROWS];          /* node id i owns slots i*RPN .. i*RPN+RPN-1, sorted by instance */
};

/* A report in the network. */
typedef Rep {
	bit used;
	unsigned inst : WV;
	unsigned seq : WV;
	unsigned ll : WS;
	unsigned inf : WS;
	unsigned dem : WS;
	unsigned ep : WV;        /* epoch and generation of the newest grant applied */
	unsigned ag : WV;
};

/* A node id: its process (if any), its requests at the provider, and its
 * messages in the network. */
typedef Node {
	unsigned phase : 2;
	unsigned inst : WV;      /* the running instance; 0 when DOWN */
	unsigned seq : WV;       /* the newest seq sent */
	unsigned await : WV;     /* seq of the heartbeat whose reply the node waits for; 0: none */
	bit joined;              /* a grant was applied */
	bit evicted;             /* the fence was evicted */
	bit fenced;              /* the fence's flag, set by its timer (MUT_TIMER_FENCE only) */
	unsigned share : WS;     /* the grant it enforces */
	unsigned ep : WV;
	unsigned ag : WV;
	unsigned dl : WS;        /* node-clock ticks until the fence deadline; 0: past it */
	unsigned ll : WS;        /* l_local */
	unsigned off : 2;        /* clock offset, 0..DRIFT */
	/* Its requests at the provider: how many, and how many more ticks of
	 * the node's clock the youngest may see (all of them may run that
	 * long: see README, "Abstractions"). */
	unsigned inf : WS;
	unsigned rem : WS;
	/* A dead instance whose requests still run. */
	unsigned oinst : WV;
	unsigned oinf : WS;
	unsigned orem : WS;
	Rep rep[NREP];           /* reports in the network */
	unsigned gkind : 3;      /* the reply to the awaited heartbeat, in the network */
	unsigned gshare : WS;
	unsigned gep : WV;
	unsigned ggen : WV;
	unsigned grem : WS;      /* lease remaining, ticks */
	bit lv;                  /* a departure (Leave) in the network ... */
	unsigned linst : WV;     /* ... of this instance ... */
	unsigned linf : WS;      /* ... with this in-flight */
};

Db db;
Db snap;                     /* the replica a failover promotes */
Node nd[NN];
unsigned fo : 2;             /* failovers so far; FMAX once none may follow */

/* Ghost state: read by the properties only. */
byte lgAge[LCAP+1];         /* ticks since L_global was last >= v (WIN+1: not in the window) */
unsigned opNoneAge : WS;     /* ticks since the key last had no operator max */
unsigned tot : WS;           /* Σ requests in flight at the provider */
bit drG[NN];                 /* node id drained by the operator (and not undrained) */
bit evG[NN];                 /* the running instance of the node id was evicted */
bit lost;                    /* a failover happened */
#ifdef LIVE
bit stable;                  /* no fault after this point (GST) */
bit beat[NN];                /* the node completed a heartbeat this tick */
bit admitted[NN];            /* the node admitted this tick */
bit part0;                   /* a message of node 0 was lost */
#endif

/* Scratch: not part of the state. */
hidden int T;                /* absolute time, for traces */
hidden int ectr;             /* epochs issued (TRACE) */
hidden byte hs, hk, hj, hq, hv, hw, hn, hi;
hidden byte hfound;
hidden int hx, hy, hz;
hidden byte hlg, hmem, helig, hpinf, hshare, hstatus, hrem, hlive, hkind, hep, hgen;
hidden byte hlearn;
hidden int hsumd, hpres, htarget;
hidden byte lls[NROWS+1];
hidden byte nll;
hidden byte vls[NROWS+1];    /* the voters' l_local */
hidden byte nvl;
hidden byte pres[MAXV];
hidden byte rk[MAXV];
hidden byte herr;
hidden int hm;
#ifndef COMPRESS
#define COMPRESS 1
#endif
hidden byte compressOn = COMPRESS;
hidden byte nm[NN];          /* the original name of each node id slot (sym.pml) */
#ifdef TRACE
hidden byte ictr[NN];        /* instances started per node id (TRACE) */
hidden int tgate, tlast;     /* trace gates (fleet.pml) */
#endif

/* The instance inst of node id n can never report or leave again: it does
 * not run and no message of it is in the network. */
#if NREP == 1
#define INFLIGHTREP(n, i) (nd[n].rep[0].used && nd[n].rep[0].inst == (i))
#elif NREP == 2
#define INFLIGHTREP(n, i) (nd[n].rep[0].used && nd[n].rep[0].inst == (i) || \
	nd[n].rep[1].used && nd[n].rep[1].inst == (i))
#else
#define INFLIGHTREP(n, i) (nd[n].rep[0].used && nd[n].rep[0].inst == (i) || \
	nd[n].rep[1].used && nd[n].rep[1].inst == (i) || nd[n].rep[2].used && nd[n].rep[2].inst == (i))
#endif
#define DEADINST(n, i) (nd[n].inst != (i) && !INFLIGHTREP(n, i) && !(nd[n].lv && nd[n].linst == (i)))

