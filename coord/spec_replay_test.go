package coord_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleettest"
)

// The trace-replay test checks that the Promela model (spec/fleet.pml) and
// the code agree. `make spec-traces` runs spin's random simulation of the
// model with 1,000 seeds and keeps each run's coordinator steps — every
// heartbeat with the grant the model computed, departures, operator actions,
// replica catch-ups and failovers — in spec/traces/traces.txt.gz. The test
// replays each step through the pure core (coord.State) and through the
// Postgres function (coord.Postgres on a test clock) and requires the three
// to agree: every grant, field by field, and every error.
//
// Time: a trace's tick t is specTick seconds after specBase, and its k-th
// step happens k µs into that second, so that steps within a tick are
// ordered as in the model without moving any lease across a tick.
// Epochs: the model numbers them 1, 2, ...; the code takes the time in µs.
// The test maps one to the other as grants reveal them and requires the
// map to stay one-to-one.

// specTraces is the corpus, relative to the package directory.
const specTraces = "../spec/traces/traces.txt.gz"

// specTick is one tick of the model.
const specTick = time.Second

var specBase = time.Date(2031, 5, 6, 7, 0, 0, 0, time.UTC)

// specStep is one line of a trace: a verb and its numbers.
type specStep struct {
	verb string
	n    []int64
	text string
}

// specTrace is one run of the model.
type specTrace struct {
	seed                        int
	ttl, bound, reqHold, margin int64
	steps                       []specStep
}

// The model's codes (spec/state.pml).
const (
	specOK      = 1 // G_OK
	specStale   = 2 // G_STALE
	specEvicted = 3 // G_EVICTED
	specInUse   = 4 // G_INUSE
)

var specStatuses = []coord.Status{coord.StatusActive, coord.StatusDraining, coord.StatusEvicted,
	coord.StatusExpired, coord.StatusDeparted}

// The number of numbers each verb carries.
var specArity = map[string]int{
	"config": 6, "hb": 19, "leave": 6, "drain": 3, "undrain": 3, "evict": 3, "limits": 3,
	"sync": 1, "failover": 1, "createkey": 4, "deletekey": 2, "relearn": 1,
}

func loadSpecTraces(t *testing.T) []specTrace {
	t.Helper()
	f, err := os.Open(specTraces)
	require.NoError(t, err, "the trace corpus is missing: run `make spec-traces` (needs spin)")
	defer f.Close()
	zr, err := gzip.NewReader(f)
	require.NoError(t, err)
	var (
		traces []specTrace
		cur    *specTrace
		line   int
	)
	sc := bufio.NewScanner(zr)
	for sc.Scan() {
		line++
		text := sc.Text()
		if text == "" || strings.HasPrefix(text, "#") {
			continue
		}
		fields := strings.Fields(text)
		if fields[0] == "trace" {
			seed, err := strconv.Atoi(fields[1])
			require.NoError(t, err, "line %d", line)
			traces = append(traces, specTrace{seed: seed})
			cur = &traces[len(traces)-1]
			continue
		}
		require.NotNil(t, cur, "line %d: a step before the first trace", line)
		want, ok := specArity[fields[0]]
		require.True(t, ok, "line %d: unknown verb %q", line, fields[0])
		require.Len(t, fields, want+1, "line %d: %q", line, text)
		st := specStep{verb: fields[0], text: text}
		for _, f := range fields[1:] {
			v, err := strconv.ParseInt(f, 10, 64)
			require.NoError(t, err, "line %d", line)
			st.n = append(st.n, v)
		}
		if st.verb == "config" {
			// nodes, TTL, margin, bound, drift, the hold the node asks for
			cur.ttl, cur.margin, cur.bound, cur.reqHold = st.n[1], st.n[2], st.n[3], st.n[5]
			continue
		}
		cur.steps = append(cur.steps, st)
	}
	require.NoError(t, sc.Err())
	return traces
}

func TestSpecReplay(t *testing.T) {
	t.Parallel()
	traces := loadSpecTraces(t)
	require.GreaterOrEqual(t, len(traces), 1000, "the corpus has too few traces: run `make spec-traces`")
	ctx := context.Background()
	// One database per worker: table database_state belongs to no key, so
	// traces replayed side by side would share it.
	pools := make([]*pgxpool.Pool, 8)
	for i := range pools {
		pools[i] = fleettest.Pool(t)
		for _, table := range specTables {
			_, err := pools[i].Exec(ctx, fmt.Sprintf("CREATE TABLE spec_%s (LIKE fleetlimit.%s)", table, table))
			require.NoError(t, err)
		}
	}

	var (
		steps, grants atomic.Int64
		errs          = make([]error, len(traces))
		next          = make(chan int)
		wg            sync.WaitGroup
	)
	for _, pool := range pools {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := range next {
				r, err := newSpecReplay(ctx, pool, traces[i])
				if err == nil {
					err = r.run(ctx)
				}
				errs[i] = err
				steps.Add(r.steps)
				grants.Add(r.grants)
			}
		}()
	}
	for i := range traces {
		next <- i
	}
	close(next)
	wg.Wait()

	failed := 0
	for i, err := range errs {
		if err != nil {
			failed++
			if failed <= 5 {
				t.Errorf("trace %d: %v", traces[i].seed, err)
			}
		}
	}
	require.Zero(t, failed, "%d of %d traces disagree with the model", failed, len(traces))
	require.Positive(t, grants.Load())
	t.Logf("%d traces, %d coordinator steps, %d grants: the model, the core and Postgres agree on every one",
		len(traces), steps.Load(), grants.Load())
}

// specReplay replays one trace.
type specReplay struct {
	tr    specTrace
	key   string
	pool  *pgxpool.Pool
	pg    *coord.Postgres
	clock *fakeClock // the Postgres coordinator's clock for the trace

	// The core's state, as the database would hold it, and the replica's.
	s, snap            coord.State
	exists, snapExists bool
	db, snapDB         coord.Database
	incarnation        int

	m2g, g2m      map[int64]int64 // epochs: model ↔ code
	k             int64           // steps so far: the µs offset of the next one
	steps, grants int64
}

// specTables are the tables a replica copies, in the order they are
// restored (database_state last: a restored key's bounds raise it).
var specTables = []string{"keys", "nodes", "drains", "evictions", "database_state"}

// newSpecReplay starts a trace as the model does: a database that has
// seen no heartbeat yet, and a replica that has the same.
func newSpecReplay(ctx context.Context, pool *pgxpool.Pool, tr specTrace) (*specReplay, error) {
	r := &specReplay{tr: tr, key: fmt.Sprintf("spec-%04d", tr.seed), pool: pool, clock: &fakeClock{},
		m2g: map[int64]int64{}, g2m: map[int64]int64{}}
	r.db = coord.Database{Incarnation: r.inc()}
	r.snapDB = r.db
	var err error
	if r.pg, err = coord.NewPostgres(pool, coord.WithClock(r.clock)); err != nil {
		return nil, err
	}
	_, err = pool.Exec(ctx, `UPDATE fleetlimit.database_state
SET incarnation = fleetlimit.incarnation(), learning_since = NULL, learning_until = NULL, max_lease_ttl_us = 0, max_request_us = 0`)
	if err == nil {
		err = r.pgSync(ctx)
	}
	return r, err
}

func (r *specReplay) run(ctx context.Context) error {
	for i, st := range r.tr.steps {
		r.k++
		now := specBase.Add(time.Duration(st.n[0])*specTick + time.Duration(r.k)*time.Microsecond)
		r.clock.Set(now)
		if err := r.step(ctx, st, now); err != nil {
			return fmt.Errorf("step %d %q: %w", i+1, st.text, err)
		}
		r.steps++
	}
	return nil
}

func (r *specReplay) step(ctx context.Context, st specStep, now time.Time) error {
	n := st.n
	switch st.verb {
	case "hb":
		return r.heartbeat(ctx, n, now)
	case "leave":
		d := coord.Departure{Key: r.key, NodeID: specNode(n[1]), Instance: specInstance(n[2]),
			Inflight: int(n[3]), Hold: time.Duration(n[4]) * specTick}
		var err error
		if !r.exists {
			err = coord.ErrUnknownKey
		} else if next, lerr := r.s.Leave(d, now); lerr != nil {
			err = lerr
		} else {
			r.s = next
		}
		return r.errors(n[5], err, r.pg.Leave(ctx, d))
	case "drain", "undrain", "evict":
		if !r.exists {
			return errors.New("the model acted on a key that does not exist")
		}
		id := specNode(n[1])
		db := r.db.Check(r.inc(), now)
		s := r.s.Incarnate(db, now, coord.Report{})
		var (
			next      coord.State
			err, perr error
		)
		switch st.verb {
		case "drain":
			next, err = s.Drain(id)
			perr = r.pg.Drain(ctx, r.key, id)
		case "undrain":
			next, err = s.Undrain(id)
			perr = r.pg.Undrain(ctx, r.key, id)
		default:
			next, err = s.Evict(id)
			perr = r.pg.Evict(ctx, r.key, id)
		}
		if err == nil {
			r.s, r.db = next, db
		}
		return r.errors(n[2], err, perr)
	case "limits":
		minLimit, maxLimit := specBound(n[1]), specBound(n[2])
		next, err := r.s.SetLimits(minLimit, maxLimit)
		if err != nil {
			return err
		}
		r.s = next
		return r.pg.SetLimits(ctx, r.key, minLimit, maxLimit)
	case "createkey":
		minLimit, maxLimit := specBound(n[1]), specBound(n[2])
		var err error
		if r.exists {
			err = coord.ErrKeyExists
		} else {
			r.s, err = coord.NewState(r.key, now).SetLimits(minLimit, maxLimit)
			r.exists = err == nil
		}
		return r.errors(n[3], err, r.pg.CreateKey(ctx, r.key, minLimit, maxLimit))
	case "deletekey":
		var err error
		db := r.db.Check(r.inc(), now)
		checked := r.s.Incarnate(db, now, coord.Report{})
		switch {
		case !r.exists:
			err = coord.ErrUnknownKey
		case r.s.Key.Incarnation != "" && r.s.Key.Incarnation != checked.Key.Incarnation, checked.Key.LearningUntil.After(now):
			err = coord.ErrLearning
		case specMembers(r.s, now) > 0:
			err = coord.ErrLiveNodes
		case specHolding(r.s, now) > 0:
			err = coord.ErrHeldCapacity
		default:
			r.exists, r.db = false, db
		}
		return r.errors(n[1], err, r.pg.DeleteKey(ctx, r.key, false))
	case "relearn":
		r.s = r.s.Relearn(now)
		_, err := r.pg.Relearn(ctx, r.key)
		return err
	case "sync":
		r.snap, r.snapExists, r.snapDB = r.s.Clone(), r.exists, r.db
		return r.pgSync(ctx)
	case "failover":
		r.s, r.exists, r.db = r.snap.Clone(), r.snapExists, r.snapDB
		r.incarnation++
		return r.pgFailover(ctx)
	}
	return fmt.Errorf("unknown verb %q", st.verb)
}

// heartbeat replays "hb t node inst seq l_local inflight demand epoch
// applied_gen | kind share l_global epoch gen lease status learning
// peer_inflight live_nodes".
func (r *specReplay) heartbeat(ctx context.Context, n []int64, now time.Time) error {
	epoch, ok := r.goEpoch(n[7])
	if !ok {
		return fmt.Errorf("the report carries model epoch %d, which no grant has shown", n[7])
	}
	rep := coord.Report{Key: r.key, NodeID: specNode(n[1]), Instance: specInstance(n[2]), Seq: n[3],
		LLocal: int(n[4]), Inflight: int(n[5]), Demand: int(n[6]), Epoch: epoch, AppliedGen: n[8],
		LeaseTTL: time.Duration(r.tr.ttl) * specTick, MaxRequestDuration: time.Duration(r.tr.reqHold) * specTick}
	s := r.s
	if !r.exists {
		s = coord.NewState(r.key, now)
	}
	db := r.db.Check(r.inc(), now)
	next, g, err := s.Incarnate(db, now, rep).Heartbeat(rep, now)
	pg, perr := r.pg.Heartbeat(ctx, rep)
	kind := n[9]
	if kind == specInUse {
		if !errors.Is(err, coord.ErrNodeIDInUse) || !errors.Is(perr, coord.ErrNodeIDInUse) {
			return fmt.Errorf("the model refuses the report (node id in use); core: %v, postgres: %v", err, perr)
		}
		return nil
	}
	if err != nil || perr != nil {
		return fmt.Errorf("the model grants; core: %v, postgres: %v", err, perr)
	}
	r.s, r.exists, r.db = next, true, db.Record(next.Key)
	if pg != g {
		return fmt.Errorf("core and postgres disagree:\ncore     %+v\npostgres %+v", g, pg)
	}
	r.grants++
	want := fmt.Sprintf("share %d, l_global %d, gen %d, lease %d, status %s, learning %t, stale %t, peer in-flight %d, live %d",
		n[10], n[11], n[13], n[14], specStatuses[n[15]], n[16] == 1, kind == specStale, n[17], n[18])
	got := fmt.Sprintf("share %d, l_global %d, gen %d, lease %d, status %s, learning %t, stale %t, peer in-flight %d, live %d",
		g.Share, g.LGlobal, g.Generation, (g.LeaseRemaining+specTick-1)/specTick, g.Status, g.Learning, g.Stale,
		g.PeerInflight, g.LiveNodes)
	if want != got {
		return fmt.Errorf("grant differs from the model's:\nmodel %s\ncode  %s", want, got)
	}
	if kind == specEvicted && g.Status != coord.StatusEvicted || kind == specOK && g.Status == coord.StatusEvicted {
		return fmt.Errorf("model answer %d, code status %s", kind, g.Status)
	}
	return r.mapEpoch(n[12], g.Epoch)
}

// inc is the database's incarnation as the core sees it: a failover
// changes it.
func (r *specReplay) inc() string { return fmt.Sprintf("spec-%d", r.incarnation) }

// goEpoch is the code's epoch for a model epoch a report carries.
func (r *specReplay) goEpoch(m int64) (int64, bool) {
	if m == 0 {
		return 0, true
	}
	g, ok := r.m2g[m]
	return g, ok
}

// mapEpoch records that model epoch m is the code's epoch g, and fails
// when that contradicts an earlier grant.
func (r *specReplay) mapEpoch(m, g int64) error {
	if m == 0 || g == 0 {
		if m != g {
			return fmt.Errorf("epoch: model %d, code %d", m, g)
		}
		return nil
	}
	if old, ok := r.m2g[m]; ok && old != g {
		return fmt.Errorf("model epoch %d is code epoch %d here but was %d before", m, g, old)
	}
	if old, ok := r.g2m[g]; ok && old != m {
		return fmt.Errorf("code epoch %d is model epoch %d here but was %d before", g, m, old)
	}
	r.m2g[m], r.g2m[g] = g, m
	return nil
}

// errors compares the model's error code with the core's and Postgres'.
func (r *specReplay) errors(want int64, core, pg error) error {
	c, p := specErrCode(core), specErrCode(pg)
	if c < 0 || p < 0 || c != want || p != want {
		return fmt.Errorf("model error %d; core: %v; postgres: %v", want, core, pg)
	}
	return nil
}

// The model's operator error codes (E_* in spec/state.pml).
func specErrCode(err error) int64 {
	switch {
	case err == nil:
		return 0
	case errors.Is(err, coord.ErrUnknownNode):
		return 1
	case errors.Is(err, coord.ErrUnknownKey):
		return 2
	case errors.Is(err, coord.ErrLiveNodes):
		return 3
	case errors.Is(err, coord.ErrKeyExists):
		return 4
	case errors.Is(err, coord.ErrHeldCapacity):
		return 5
	case errors.Is(err, coord.ErrLearning):
		return 6
	}
	return -1
}

// pgSync copies the key's rows, and the database's own record, to the
// replica's tables.
func (r *specReplay) pgSync(ctx context.Context) error {
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error { return r.copyTables(ctx, tx, "fleetlimit.", "spec_") })
}

// pgFailover restores them from the replica's tables, under another
// incarnation: the database's record, and a key that had recorded one,
// see it change.
func (r *specReplay) pgFailover(ctx context.Context) error {
	return pgx.BeginFunc(ctx, r.pool, func(tx pgx.Tx) error {
		if err := r.copyTables(ctx, tx, "spec_", "fleetlimit."); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, `UPDATE fleetlimit.database_state SET incarnation = 'spec: lost'`); err != nil {
			return err
		}
		_, err := tx.Exec(ctx, `UPDATE fleetlimit.keys SET incarnation = 'spec: lost'
WHERE key = $1 AND incarnation IS NOT NULL`, r.key)
		return err
	})
}

// copyTables replaces the key's rows in the tables named with prefix to by
// those named with prefix from, and database_state's one row likewise.
func (r *specReplay) copyTables(ctx context.Context, tx pgx.Tx, from, to string) error {
	for _, table := range slices.Backward(specTables) {
		where, args := r.rowsOf(table)
		if _, err := tx.Exec(ctx, "DELETE FROM "+to+table+where, args...); err != nil {
			return err
		}
	}
	for _, table := range specTables {
		where, args := r.rowsOf(table)
		if _, err := tx.Exec(ctx, "INSERT INTO "+to+table+" SELECT * FROM "+from+table+where, args...); err != nil {
			return err
		}
	}
	return nil
}

// rowsOf is the WHERE clause, and its arguments, that picks the trace's
// rows of table: the key's, or database_state's one row.
func (r *specReplay) rowsOf(table string) (string, []any) {
	if table == "database_state" {
		return "", nil
	}
	return " WHERE key = $1", []any{r.key}
}

func specNode(i int64) string     { return fmt.Sprintf("n%d", i) }
func specInstance(i int64) string { return fmt.Sprintf("i%03d", i) }

// specBound is an operator bound: nil for the model's 0.
func specBound(v int64) *int {
	if v == 0 {
		return nil
	}
	b := int(v)
	return &b
}

// specHolding counts the rows of s that are no members but hold a
// reserve above 0 at now.
func specHolding(s coord.State, now time.Time) int {
	holding := 0
	for _, n := range s.Nodes {
		if !n.Member(now) && n.Reserve(now) > 0 {
			holding++
		}
	}
	return holding
}

// specMembers counts the key's live members at now.
func specMembers(s coord.State, now time.Time) int {
	members := 0
	for _, n := range s.Nodes {
		if n.Member(now) {
			members++
		}
	}
	return members
}
