/*
 * coord.pml: the coordinator, step for step the rules of coord.State
 * (Heartbeat, Leave, Drain, Undrain, Evict, Incarnate, learn) and of their
 * SQL twins in migrations/sql/00003_requests_not_admissions.sql (the
 * split of the targets as 00007_largest_remainder.sql replaced it). Each
 * inline is run inside one d_step: a transaction. The mutants (MUT_*)
 * replace one rule by the weaker rule the code used before.
 */


/* coord.NodeState.Member, Holding, Reserve and votes. */
#define MEMBER(r)  (r.used && r.lease > 0 && !r.ev && !r.dep)
#define VOTES(r)   (r.used == 2)
#define HOLDING(r) (r.used && r.hold > 0)
#define RESERVE(r) (HOLDING(r) -> MAX2(MAX2(r.unack, r.share), r.inf) : 0)
#ifdef MUT_ACKED_RESERVE
/* (f) the reserve is the acknowledged share only: larger grants the node
 * has not acknowledged replacing are forgotten. */
#define RES(r) (HOLDING(r) -> MAX2(r.share, r.inf) : 0)
#else
#define RES(r) RESERVE(r)
#endif

#define STATUS(r) (r.ev -> ST_EVICTED : (r.dep -> ST_DEPARTED : \
	(r.lease == 0 -> ST_EXPIRED : (r.dr -> ST_DRAINING : ST_ACTIVE))))

/* coord.NodeState.gone: the row's hold has ended; it is deleted at the
 * next heartbeat of another row. */
#define GONE(k) (db.row[k].hold == 0)

#define ROWF(OP, a, b) OP(a, b, used) OP(a, b, dr) OP(a, b, ev) OP(a, b, dep) OP(a, b, inst) \
	OP(a, b, seq) OP(a, b, ll) OP(a, b, inf) OP(a, b, dem) OP(a, b, share) OP(a, b, ep) \
	OP(a, b, gen) OP(a, b, unack) OP(a, b, lease) OP(a, b, hold)
#define SWAPF(a, b, f) hx = db.row[a].f; db.row[a].f = db.row[b].f; db.row[b].f = hx;
#define CLEARF(a, b, f) db.row[a].f = 0;
#define COPYF(a, b, f) a.row[hk].f = b.row[hk].f;

inline clearRow(k) {
	ROWF(CLEARF, k, 0)
	skip
}

/* sortRows keeps each node id's rows first and in instance order, as the
 * Go core keeps them sorted by (node id, instance): Drain and Evict revoke
 * in that order. */
inline sortRows() {
	for (hq : 0 .. NN-1) {
		for (hw : 1 .. RPN-1) {
			for (hv : hq*RPN .. hq*RPN+RPN-2) {
				if
				:: !db.row[hv].used && db.row[hv+1].used ||
				   db.row[hv].used && db.row[hv+1].used && db.row[hv].inst > db.row[hv+1].inst ->
					ROWF(SWAPF, hv, hv+1)
					skip
				:: else
				fi
			}
		}
	}
}

/* copyDb copies the whole database: a replica catching up, or a failover. */
inline copyDb(dst, src) {
	dst.exists = src.exists; dst.incRec = src.incRec; dst.incStale = src.incStale; dst.seen = src.seen; dst.ep = src.ep; dst.gen = src.gen;
	dst.lg = src.lg; dst.learn = src.learn; dst.opmax = src.opmax; dst.opmin = src.opmin;
	dst.dbStale = src.dbStale; dst.dbSeen = src.dbSeen; dst.dbLearn = src.dbLearn;
	for (hk : 0 .. NN-1) { dst.drain[hk] = src.drain[hk] };
	for (hk : 0 .. NN*EVN-1) { dst.evi[hk] = src.evi[hk] };
	for (hk : 0 .. NROWS-1) {
		ROWF(COPYF, dst, src)
		skip
	}
}

/* newEpoch: later than every epoch issued so far (learn takes max(now µs,
 * epoch + 1)). Only existing epochs are ever compared, so in the search
 * "every epoch that still exists somewhere" is enough. */
inline newEpoch() {
#ifdef TRACE
	ectr++;
	hv = ectr;
#else
	hv = 0;
	EACH_EP(MAXOF)
	hv++;
#endif
}

/* learn (coord.State.learn): a new epoch, and learning mode for the key's
 * longest lease plus request bound (every report carries TTL and REQHOLD,
 * recorded by the key's first heartbeat: seen), the report's included
 * (R: 1 when a report brought the evidence). */
inline learnKey(R) {
	if
	:: R || db.seen -> hw = TTL + REQHOLD
	:: else -> hw = 0
	fi;
	learnFor(hw)
}

/* learnFor: a new epoch, and learning mode for N ticks at least. */
inline learnFor(N) {
#ifndef MUT_NO_EPOCH
	newEpoch();
	db.ep = hv;
	db.learn = MAX2(db.learn, N)
#else
	/* (e) no epoch after lost state: the loss goes unnoticed. */
	skip
#endif
}

/* createKey: the first heartbeat of a key creates its row (and so does
 * the operator's CreateKey, with limits). Its incarnation is recorded at
 * its first check (incarnate): a fresh key is never in learning mode. */
inline createKey(MAXL, MINL) {
	newEpoch();
	db.exists = 1; db.incRec = 0; db.incStale = 0; db.seen = 0; db.ep = hv; db.gen = 0; db.lg = 0; db.learn = 0;
	db.opmax = MAXL; db.opmin = MINL;
	for (hk : 0 .. NN-1) { db.drain[hk] = 0 };
	for (hk : 0 .. NN*EVN-1) { db.evi[hk] = 0 };
	for (hk : 0 .. NROWS-1) { clearRow(hk) }
}

/* incarnateDb (coord.Database.Check): the database's own record, which
 * no key owns. After a failover its incarnation is not the database's:
 * record the new one and enter the database's learning mode, for the
 * longest lease plus request bound any key recorded (none: a history
 * without a heartbeat has no grant to forget). Every node has the same
 * lease and bound here, so a key's first check, which learns at least
 * its report's own from the database's check (learning_since), learns
 * no longer than dbLearn. */
inline incarnateDb() {
#if FMAX > 0
	if
	:: db.dbStale && db.dbSeen -> db.dbLearn = MAX2(db.dbLearn, TTL + REQHOLD)
	:: else
	fi;
	db.dbStale = 0
#else
	/* Without failovers the record never changes (and spin's limit on a
	 * d_step's size is near in the searches with symmetry). */
	skip
#endif
}

/* incarnate (fleetlimit.incarnate: coord.Database.Check, then
 * coord.State.Incarnate): the database's record, then the key's. The
 * key's first check records the database's incarnation and takes the
 * database's learning mode, with a new epoch: a key created, or never
 * checked, since a loss may be one whose grants were lost with it. After
 * a failover the key's recorded incarnation is not the database's:
 * learn, the report's lease and bound counted (R: 1 for a heartbeat, 0
 * for an operator's action). */
inline incarnate(R) {
	incarnateDb();
#if FMAX > 0
	if
	:: db.incStale ->
		db.incStale = 0;
		learnKey(R)
	:: !db.incStale && !db.incRec && db.dbLearn > 0 ->
		hw = db.dbLearn;
		learnFor(hw)
	:: else
	fi;
#else
	/* Without failovers no key is stale, and the database never learns. */
	skip;
#endif
	db.incRec = 1
}

/* evictedInst sets hv when inst of node id I is in table evictions. */
inline evictedInst(I, INST) {
	hv = 0;
	for (hk : (I)*EVN .. (I)*EVN+EVN-1) {
		if
		:: db.evi[hk] != 0 && db.evi[hk] == (INST) -> hv = 1
		:: else
		fi
	}
}

/* addEviction records an evicted instance whose row goes. */
inline addEviction(I, INST) {
	evictedInst(I, INST);
	if
	:: !hv ->
		hw = NOSLOT;
		for (hk : (I)*EVN .. (I)*EVN+EVN-1) {
			if
			:: hw == NOSLOT && db.evi[hk] == 0 -> hw = hk
			:: else
			fi
		};
		assert(hw != NOSLOT);
		db.evi[hw] = INST
	:: else
	fi
}

inline findRow(I, INST) {
	hs = NOSLOT;
	for (hk : (I)*RPN .. (I)*RPN+RPN-1) {
		if
		:: db.row[hk].used && db.row[hk].inst == (INST) -> hs = hk
		:: else
		fi
	}
}

/* storedGrant (coord.State.storedGrant): the answer from the stored row. */
inline storedGrant(S) {
	hshare = db.row[S].share; hlg = db.lg; hep = db.row[S].ep; hgen = db.row[S].gen;
	hrem = db.row[S].lease; hstatus = STATUS(db.row[S]); hlearn = (db.learn > 0);
	hpinf = 0;
	hlive = (MEMBER(db.row[S]) -> 1 : 0);
	for (hk : 0 .. NROWS-1) {
		if
		:: hk != S && HOLDING(db.row[hk]) -> hpinf = hpinf + db.row[hk].inf
		:: else
		fi;
		if
		:: hk != S && MEMBER(db.row[hk]) -> hlive++
		:: else
		fi
	}
}

/* takeReport (coord.takeReport): the row takes the report's counts and
 * acknowledges its grant if the report applied it. */
inline takeReport(S, I, J) {
	db.row[S].seq = nd[I].rep[J].seq;
	/* NodeState.Measuring: decided when the row reports, from the share
	 * it held before this report, or kept from the report before while
	 * the node wants capacity and is not drained (a joiner's first report
	 * never votes). The row's draining flag is set before this. */
	db.row[S].used = ((db.row[S].share > 0 || nd[I].rep[J].inf > 0 ||
		db.row[S].used == 2 && nd[I].rep[J].dem > 0 && !db.row[S].dr) -> 2 : 1);
	db.row[S].ll = nd[I].rep[J].ll;
	db.row[S].inf = nd[I].rep[J].inf;
	db.row[S].dem = nd[I].rep[J].dem;
	if
	:: nd[I].rep[J].ep == db.row[S].ep && nd[I].rep[J].ag >= db.row[S].gen ->
		db.row[S].unack = db.row[S].share
	:: else
	fi
}

/* lostState (coord.State.lostState) sets hv when the report proves that
 * the database forgot grants it issued. */
inline lostState(I, J) {
	hv = 0;
	if
	:: nd[I].rep[J].ep == 0 -> skip
	:: nd[I].rep[J].ep != 0 && nd[I].rep[J].ep > db.ep -> hv = 1
	:: nd[I].rep[J].ep != 0 && nd[I].rep[J].ep == db.ep && nd[I].rep[J].ag > db.gen -> hv = 1
	:: else ->
		if
		:: !hfound -> hv = (nd[I].rep[J].inf > 0 || db.gen == 0)
		:: else -> hv = (db.row[hs].ep == nd[I].rep[J].ep && nd[I].rep[J].ag > db.row[hs].gen)
		fi
	fi
}

/* The evicted row of the reporting instance is answered "evicted". */
#define EVICTED_ROW(S) (db.row[S].ev)

/* coordHeartbeat: coord.State.Incarnate followed by coord.State.Heartbeat
 * (fleetlimit.heartbeat) for report J of node id I. The answer is left in
 * hkind and the h* scratch variables. */
inline coordHeartbeat(I, J) {
	if
	:: !db.exists -> createKey(0, 0)
	:: else
	fi;
	findRow(I, nd[I].rep[J].inst);
	hfound = (hs != NOSLOT);
	evictedInst(I, nd[I].rep[J].inst);
	if
	:: !hfound && hv ->
		/* An evicted instance whose row has gone. */
		incarnate(1);
		hshare = 0; hlg = db.lg; hep = 0; hgen = 0; hrem = 0; hstatus = ST_EVICTED; hlearn = (db.learn > 0);
		hpinf = 0; hlive = 0;
		for (hk : 0 .. NROWS-1) {
			if
			:: HOLDING(db.row[hk]) -> hpinf = hpinf + db.row[hk].inf
			:: else
			fi;
			if
			:: MEMBER(db.row[hk]) -> hlive++
			:: else
			fi
		};
		hkind = G_EVICTED
	:: else ->
		/* ErrNodeIDInUse rolls everything back, so it is decided first. */
		hv = 0;
		if
		:: hfound && (nd[I].rep[J].seq <= db.row[hs].seq || db.row[hs].dep || EVICTED_ROW(hs)) -> skip
		:: else ->
			for (hk : (I)*RPN .. (I)*RPN+RPN-1) {
				if
				:: MEMBER(db.row[hk]) && db.row[hk].inst != nd[I].rep[J].inst -> hv = 1
				:: else
				fi
			}
		fi;
		if
		:: hv -> hkind = G_INUSE
		:: else ->
			/* The database's incarnation, then the report's evidence. */
			incarnate(1);
			lostState(I, J);
			if
			:: hv -> learnKey(1)
			:: else
			fi;
			if
			:: hfound && (nd[I].rep[J].seq <= db.row[hs].seq || db.row[hs].dep) ->
				storedGrant(hs);
				hkind = G_STALE
			:: hfound && !(nd[I].rep[J].seq <= db.row[hs].seq || db.row[hs].dep) && EVICTED_ROW(hs) ->
				takeReport(hs, I, J);
				storedGrant(hs);
				hkind = G_EVICTED
			:: else ->
				mainPath(I, J);
				hkind = G_OK
			fi
		fi
	fi
}

inline mainPath(I, J) {
	/* The other rows: delete those whose hold ended, sum the rest. */
	hpinf = 0; hpres = 0; hmem = 0; helig = 0; hsumd = 0; nll = 0; nvl = 0;
	for (hk : 0 .. NROWS-1) {
		if
		:: hk == hs || !db.row[hk].used -> skip
		:: else ->
			if
			:: GONE(hk) ->
#ifndef MUT_EVICT_REJOIN
				/* (c) without this, an evicted instance whose row has
				 * gone joins afresh (the rule before table evictions). */
				if
				:: db.row[hk].ev ->
					hn = hk; hi = db.row[hk].inst;
					addEviction(hn/RPN, hi);
					hk = hn
				:: else
				fi;
#endif
				clearRow(hk)
			:: else ->
				if
				:: HOLDING(db.row[hk]) ->
					hpinf = hpinf + db.row[hk].inf;
					hpres = hpres + RES(db.row[hk])
				:: else
				fi;
				if
				:: MEMBER(db.row[hk]) ->
					hmem++;
					lls[nll] = db.row[hk].ll;
					nll++;
					if
					:: VOTES(db.row[hk]) -> vls[nvl] = db.row[hk].ll; nvl++
					:: else
					fi;
					if
					:: !db.row[hk].dr && db.row[hk].dem > 0 ->
						helig++;
						hsumd = hsumd + db.row[hk].dem
					:: else
					fi
				:: else
				fi
			fi
		fi
	};
	/* A fresh row takes a free slot of the node id. */
	if
	:: !hfound ->
		hs = NOSLOT;
		for (hk : (I)*RPN .. (I)*RPN+RPN-1) {
			if
			:: hs == NOSLOT && !db.row[hk].used -> hs = hk
			:: else
			fi
		};
		assert(hs != NOSLOT);
		db.row[hs].used = 1;
		db.row[hs].inst = nd[I].rep[J].inst
	:: else
	fi;
	/* Draining comes from the node id's mark. */
#ifdef MUT_ROW_DRAIN
	/* (d) the old rule: the flag lives on the row while its lease runs;
	 * a lapse or a fresh row forgets it. */
	if
	:: hfound && db.row[hs].lease > 0 && !db.row[hs].dep -> skip
	:: else -> db.row[hs].dr = 0
	fi;
#else
	db.row[hs].dr = db.drain[I];
#endif
	takeReport(hs, I, J);
	db.seen = 1; db.dbSeen = 1;
	db.row[hs].lease = TTL;
#ifdef MUT_NO_HOLD
	/* (a) the lease covers admissions only: the reserve ends with it. */
	db.row[hs].hold = TTL;
#else
	db.row[hs].hold = TTL + REQHOLD;
#endif
	/* L_global: the lower median of the voting members' l_local, self
	 * included when it votes (its share before this report, the report's
	 * in-flight: the row has taken the report, not yet the new share).
	 * With no voter the key keeps its L_global; a key without one (0)
	 * takes every member's. Then the operator's clamp. */
	lls[nll] = db.row[hs].ll;
	nll++;
	if
	:: VOTES(db.row[hs]) -> vls[nvl] = db.row[hs].ll; nvl++
	:: else
	fi;
	if
	:: nvl == 0 && db.lg > 0 ->
		hlg = db.lg
	:: else ->
		if
		:: nvl == 0 ->
			for (hw : 0 .. nll-1) { vls[hw] = lls[hw] };
			nvl = nll
		:: else
		fi;
		for (hw : 1 .. nvl-1) {
			for (hv : 0 .. nvl-2) {
				if
				:: vls[hv] > vls[hv+1] -> hx = vls[hv]; vls[hv] = vls[hv+1]; vls[hv+1] = hx
				:: else
				fi
			}
		};
		hlg = vls[(nvl-1)/2]
	fi;
	if
	:: db.opmax > 0 && hlg > db.opmax -> hlg = db.opmax
	:: else
	fi;
	if
	:: db.opmin > 0 && hlg < db.opmin -> hlg = db.opmin
	:: else
	fi;
	/* Target, then the occupancy cap. */
	htarget = 0;
	if
	:: !db.row[hs].dr && db.row[hs].dem > 0 ->
		helig++;
		hsumd = hsumd + db.row[hs].dem;
		hx = MAX2(0, hlg - helig);
#if LCAP > 1
		/* coord.splitTarget: 1 plus self's part of the rest hx split by
		 * demand by largest remainder (coord.apportion): the floor of
		 * hx·d/D, and one of the hz units left over when fewer than hz
		 * eligible members (hw) come first by remainder descending, then
		 * node id and instance. The gone rows are cleared. The order of
		 * ties by node id is not symmetric in node ids, so a search with
		 * L_global above 1 runs without symmetry reduction. */
#if !defined(LIVE) && !defined(TRACE) && !defined(NOSYM)
#error "coord.pml: L_global above 1 (LCAP) needs NOSYM, LIVE or TRACE: the order of tied remainders is by node id"
#endif
		hy = hx * db.row[hs].dem % hsumd;
		hz = hx - hx * db.row[hs].dem / hsumd;
		hw = 0;
		for (hk : 0 .. NROWS-1) {
			if
			:: hk != hs && MEMBER(db.row[hk]) && !db.row[hk].dr && db.row[hk].dem > 0 ->
				hz = hz - hx * db.row[hk].dem / hsumd;
				if
				:: hx * db.row[hk].dem % hsumd > hy ||
				   hx * db.row[hk].dem % hsumd == hy &&
				   (hk/RPN < hs/RPN || hk/RPN == hs/RPN && db.row[hk].inst < db.row[hs].inst) -> hw++
				:: else
				fi
			:: else
			fi
		};
		htarget = 1 + hx * db.row[hs].dem / hsumd + (hw < hz -> 1 : 0)
#else
		/* coord.splitTarget with L_global 1, as in every search with
		 * symmetry reduction: no rest to split (hx is max(0, 1 −
		 * eligible), and self is eligible), so the target is 1. (The
		 * loop above, with the symmetry reduction, would make the
		 * heartbeat's d_step longer than spin allows.) */
		assert(hx == 0);
		htarget = 1
#endif
	:: else
	fi;
	hx = MAX2(0, MIN2(htarget, hlg - hpres));
	/* In learning mode, no more than the node proves it holds: its
	 * in-flight, or the share this epoch already granted it. */
	if
	:: db.learn > 0 ->
		hy = db.row[hs].inf;
		if
		:: hfound && db.row[hs].ep == db.ep -> hy = MAX2(hy, db.row[hs].share)
		:: else
		fi;
		hx = MIN2(hx, hy)
	:: else
	fi;
	if
	:: !hfound || hx != db.row[hs].share || db.row[hs].ep != db.ep ->
		db.gen++;
		db.row[hs].share = hx;
		db.row[hs].ep = db.ep;
		db.row[hs].gen = db.gen;
		db.row[hs].unack = MAX2(db.row[hs].unack, hx)
	:: else
	fi;
	db.lg = hlg;
	hshare = db.row[hs].share; hep = db.row[hs].ep; hgen = db.row[hs].gen; hrem = TTL;
	hstatus = (db.row[hs].dr -> ST_DRAINING : ST_ACTIVE); hlearn = (db.learn > 0);
	hlive = hmem + 1;
	sortRows()
}

/* coordLeave (coord.State.Leave, fleetlimit.leave) takes node id I's
 * departure: the row stops being a member and reserves the departure's
 * in-flight until now + its hold, and stays until its old hold would have
 * ended. herr: E_OK, E_NODE, E_KEY. */
inline coordLeave(I) {
	if
	:: !db.exists -> herr = E_KEY
	:: else ->
		findRow(I, nd[I].linst);
		if
		:: hs == NOSLOT ->
			evictedInst(I, nd[I].linst);
			herr = (hv -> E_OK : E_NODE)
		:: else ->
			herr = E_OK;
			db.row[hs].dep = 1; db.row[hs].share = 0; db.row[hs].unack = 0;
			db.row[hs].inf = nd[I].linf; db.row[hs].dem = 0; db.row[hs].lease = 0;
#if defined(MUT_NO_HOLD)
			/* (a): nothing held past the lease. */
			skip
#elif defined(MUT_LEAVE_SHORTENS)
			/* (g) the rule before f2498da: the departure's hold replaces
			 * the row's. */
			db.row[hs].hold = (nd[I].linf > 0 -> REQHOLD : 0)
#else
			db.row[hs].hold = MAX2(db.row[hs].hold, (nd[I].linf > 0 -> REQHOLD : 0))
#endif
		fi
	fi
}

/* revoke (coord.State.revoke): a positive grant drops to 0 under a new
 * generation. */
inline revoke(k) {
	if
	:: db.row[k].share > 0 ->
		db.gen++;
		db.row[k].share = 0;
		db.row[k].ep = db.ep;
		db.row[k].gen = db.gen
	:: else
	fi
}

inline hasRows(I) {
	hv = 0;
	for (hk : (I)*RPN .. (I)*RPN+RPN-1) {
		if
		:: db.row[hk].used -> hv = 1
		:: else
		fi
	}
}

/* coordDrain, coordUndrain, coordEvict: coord.State.Drain, Undrain, Evict
 * (fleetlimit.set_flags); herr = 1 for ErrUnknownNode. */
inline coordDrain(I) {
	hasRows(I);
#ifdef MUT_ROW_DRAIN
	if
	:: !hv -> herr = E_NODE
#else
	if
	:: !hv && !db.drain[I] -> herr = E_NODE
#endif
	:: else ->
		herr = E_OK;
		incarnate(0);
#ifndef MUT_ROW_DRAIN
		db.drain[I] = 1;
#endif
		for (hk : (I)*RPN .. (I)*RPN+RPN-1) {
			if
			:: db.row[hk].used -> db.row[hk].dr = 1; revoke(hk)
			:: else
			fi
		}
	fi
}

inline coordUndrain(I) {
	hasRows(I);
	if
	:: !hv && !db.drain[I] -> herr = E_NODE
	:: else ->
		herr = E_OK;
		incarnate(0);
		db.drain[I] = 0;
		for (hk : (I)*RPN .. (I)*RPN+RPN-1) {
			if
			:: db.row[hk].used -> db.row[hk].dr = 0
			:: else
			fi
		}
	fi
}

inline coordEvict(I) {
	hasRows(I);
	if
	:: !hv -> herr = E_NODE
	:: else ->
		herr = E_OK;
		incarnate(0);
		for (hk : (I)*RPN .. (I)*RPN+RPN-1) {
			if
			:: db.row[hk].used -> db.row[hk].ev = 1; revoke(hk)
			:: else
			fi
		}
	fi
}

/* coordDeleteKey (fleetlimit.delete_key without force): E_LEARN while the
 * rows may not show what the nodes hold (the key's recorded incarnation is
 * not the database's, or it is in learning mode), E_LIVE while the key has
 * a member, E_HELD while another row still holds a reserve; otherwise the
 * key and everything on it goes. A refusal changes nothing (the
 * transaction rolls back). */
inline coordDeleteKey() {
	hv = 0;
#ifndef MUT_DELETE_LEARN
	/* (l) omits this: the rows are read as the database has them, also
	 * after it lost the last commits. */
	if
	:: db.incStale || db.learn > 0 || (!db.incRec && (db.dbLearn > 0 || (db.dbStale && db.dbSeen))) -> hv = 3
	:: else
	fi;
#endif
	for (hk : 0 .. NROWS-1) {
		if
		:: MEMBER(db.row[hk]) && hv != 3 -> hv = 1
#ifndef MUT_DELETE_HELD
		/* (k) omits this: only members refuse the delete, and the rows
		 * still holding their reserve go with the key. */
		:: !MEMBER(db.row[hk]) && RESERVE(db.row[hk]) > 0 && hv == 0 -> hv = 2
#endif
		:: else
		fi
	};
	if
	:: hv == 3 -> herr = E_LEARN
	:: hv == 1 -> herr = E_LIVE
	:: hv == 2 -> herr = E_HELD
	:: else ->
		herr = E_OK;
		incarnateDb();
		db.exists = 0; db.incRec = 0; db.incStale = 0; db.seen = 0; db.ep = 0; db.gen = 0; db.lg = 0; db.learn = 0;
		db.opmax = 0; db.opmin = 0;
		for (hk : 0 .. NN-1) { db.drain[hk] = 0 };
		for (hk : 0 .. NN*EVN-1) { db.evi[hk] = 0 };
		for (hk : 0 .. NROWS-1) { clearRow(hk) }
	fi
}
