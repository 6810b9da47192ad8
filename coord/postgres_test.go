package coord_test

import (
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net"
	"slices"
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
	"github.com/fleetlimit/fleetlimit/migrations"
)

func newPostgres(t testing.TB, pool *pgxpool.Pool, opts ...coord.PostgresOption) *coord.Postgres {
	t.Helper()
	p, err := coord.NewPostgres(pool, opts...)
	require.NoError(t, err)
	return p
}

func TestPostgresHeartbeatBasics(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	clock := newFakeClock(t0)
	p := newPostgres(t, fleettest.Pool(t), coord.WithClock(clock))

	g, err := p.Heartbeat(ctx, rep("a", 1, 8, 0, 1, 0))
	require.NoError(t, err)
	require.Equal(t, coord.Grant{Share: 8, LGlobal: 8, Epoch: t0.UnixMicro(), Generation: 1, LeaseRemaining: ttl,
		Status: coord.StatusActive, LiveNodes: 1}, g)

	clock.Advance(500 * time.Millisecond)
	g, err = p.Heartbeat(ctx, rep("a", 1, 8, 0, 0, 0))
	require.NoError(t, err)
	require.True(t, g.Stale)
	require.Equal(t, ttl-500*time.Millisecond, g.LeaseRemaining)

	other := rep("a", 2, 8, 0, 0, 0)
	other.Instance = "x"
	_, err = p.Heartbeat(ctx, other)
	require.ErrorIs(t, err, coord.ErrNodeIDInUse)

	nodes, err := p.Nodes(ctx, "k")
	require.NoError(t, err)
	require.Len(t, nodes, 1)
	require.Equal(t, t0.Add(ttl), nodes[0].LeaseExpiresAt.UTC())

	keys, err := p.Keys(ctx)
	require.NoError(t, err)
	require.Len(t, keys, 1)
	require.Equal(t, 8, keys[0].SumShare)

	require.NoError(t, p.Drain(ctx, "k", "a"))
	require.NoError(t, p.Undrain(ctx, "k", "a"))
	require.NoError(t, p.Evict(ctx, "k", "a"))
	require.ErrorIs(t, p.Drain(ctx, "k", "zz"), coord.ErrUnknownNode)
	require.ErrorIs(t, p.Drain(ctx, "zz", "a"), coord.ErrUnknownKey)
	one := 1
	require.NoError(t, p.SetLimits(ctx, "k", &one, nil))
	require.NoError(t, p.SetAggregate(ctx, "k", coord.AggregateMin))
	require.ErrorIs(t, p.Leave(ctx, coord.Departure{Key: "k", NodeID: "a", Instance: "nope"}), coord.ErrUnknownNode)
	require.NoError(t, p.Leave(ctx, coord.Departure{Key: "k", NodeID: "a", Instance: "a-1"}))
}

// TestPostgresTimeoutKeepsTheConnection: a heartbeat whose context ends
// while it waits for the key's row lock, and still waits a grace later,
// is cancelled in the database and returns, and its connection goes back
// to the pool. Cut instead, each timed-out heartbeat cost the next one a
// new connection: 40 nodes beating every 100 ms on a 2-core machine
// tipped into heartbeats that all timed out, and stayed there. A
// departure and an operator's call are handled alike: cut, a node's Stop
// during a partition held a slot of the pool for up to 15 s while pgx
// gave up on the connection. The listings, which read without the row
// lock, wait here behind a lock on the nodes table, and a new key with
// rates behind one on the keys table.
func TestPostgresTimeoutKeepsTheConnection(t *testing.T) {
	t.Parallel()
	for _, op := range []struct {
		name  string
		call  func(ctx context.Context, p *coord.Postgres) error
		table string // the table to lock, rather than the key's row
	}{
		{"heartbeat", func(ctx context.Context, p *coord.Postgres) error {
			_, err := p.Heartbeat(ctx, rep("a", 2, 8, 0, 1, 0))
			return err
		}, ""},
		{"leave", func(ctx context.Context, p *coord.Postgres) error {
			return p.Leave(ctx, coord.Departure{Key: "k", NodeID: "a", Instance: "a-1"})
		}, ""},
		{"drain", func(ctx context.Context, p *coord.Postgres) error { return p.Drain(ctx, "k", "a") }, ""},
		{"relearn", func(ctx context.Context, p *coord.Postgres) error {
			_, err := p.Relearn(ctx, "k")
			return err
		}, ""},
		{"keys", func(ctx context.Context, p *coord.Postgres) error {
			_, err := p.Keys(ctx)
			return err
		}, "fleetlimit.nodes"},
		{"nodes", func(ctx context.Context, p *coord.Postgres) error {
			_, err := p.Nodes(ctx, "k")
			return err
		}, "fleetlimit.nodes"},
		{"create with rates", func(ctx context.Context, p *coord.Postgres) error {
			return p.CreateKey(ctx, "k2", nil, nil, coord.WithRates(coord.Rates{Requests: 600}))
		}, "fleetlimit.keys"},
	} {
		t.Run(op.name, func(t *testing.T) {
			t.Parallel()
			ctx := context.Background()
			pool, p, tx := lockedKey(t)
			if op.table != "" {
				require.NoError(t, tx.Rollback(ctx))
				var err error
				tx, err = pool.Begin(ctx)
				require.NoError(t, err)
				_, err = tx.Exec(ctx, "LOCK TABLE "+op.table+" IN ACCESS EXCLUSIVE MODE")
				require.NoError(t, err)
			}
			defer func() { _ = tx.Rollback(ctx) }() // a failure must not leave the lock held
			// With a timeout of a second, the call gives up and the
			// statement is cancelled a second after the timeout.
			octx, cancel := context.WithTimeout(ctx, time.Second)
			start := time.Now()
			err := op.call(octx, p)
			cancel()
			require.ErrorIs(t, err, context.DeadlineExceeded)
			if op.table == "fleetlimit.nodes" { // the listings change nothing
				require.NotErrorIs(t, err, coord.ErrOutcomeUnknown)
				require.ErrorContains(t, err, "the statement was still running")
			} else {
				require.ErrorIs(t, err, coord.ErrOutcomeUnknown)
				require.ErrorContains(t, err, "the statement was still running, and its change may yet be made")
			}
			require.GreaterOrEqual(t, time.Since(start), 1500*time.Millisecond, "the statement had its grace")
			// The cancelled statement keeps its connection until it has stopped.
			require.Eventually(t, func() bool { return pool.Stat().AcquiredConns() == 1 }, 10*time.Second, 5*time.Millisecond) // the lock's
			require.NoError(t, tx.Rollback(ctx))

			_, err = p.Heartbeat(ctx, rep("a", 3, 8, 0, 1, 0))
			require.NoError(t, err)
			st := pool.Stat()
			require.Equal(t, int32(2), st.TotalConns(), "a connection was cut")
			require.Equal(t, int64(2), st.NewConnsCount())
		})
	}
}

// lockedKey returns a pool of at least two connections, a coordinator on
// it with node a's first heartbeat on key k, and a transaction of the pool
// holding k's row lock.
func lockedKey(t *testing.T) (*pgxpool.Pool, *coord.Postgres, pgx.Tx) {
	t.Helper()
	ctx := context.Background()
	pool := fleettest.Pool(t)
	p := newPostgres(t, pool)
	_, err := p.Heartbeat(ctx, rep("a", 1, 8, 0, 1, 0))
	require.NoError(t, err)
	// Two connections in the pool: one for the lock, one for the heartbeat.
	c1, err := pool.Acquire(ctx)
	require.NoError(t, err)
	c2, err := pool.Acquire(ctx)
	require.NoError(t, err)
	c1.Release()
	c2.Release()
	return pool, p, lockKey(t, pool)
}

// poolOf opens a pool of at most maxConns connections on a database of its
// own, once setup (nil: none) has changed its configuration, closed at
// cleanup, and a coordinator on it with node a's first heartbeat on key k.
// It returns the pool, the coordinator and the database's DSN.
func poolOf(t *testing.T, maxConns int32, setup func(*pgxpool.Config)) (*pgxpool.Pool, *coord.Postgres, string) {
	t.Helper()
	ctx := context.Background()
	dsn := fleettest.DSN(t)
	cfg, err := pgxpool.ParseConfig(dsn)
	require.NoError(t, err)
	cfg.MaxConns = maxConns
	if setup != nil {
		setup(cfg)
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	p := newPostgres(t, pool)
	_, err = p.Heartbeat(ctx, rep("a", 1, 8, 0, 1, 0))
	require.NoError(t, err)
	return pool, p, dsn
}

// lockOutside connects to dsn, outside any pool, and returns a
// transaction holding key k's row lock; the connection closes at cleanup.
func lockOutside(t *testing.T, dsn string) pgx.Tx {
	t.Helper()
	conn, err := pgx.Connect(context.Background(), dsn)
	require.NoError(t, err)
	t.Cleanup(func() { _ = conn.Close(context.Background()) })
	return lockKey(t, conn)
}

// lockKey begins a transaction on db that holds key k's row lock.
func lockKey(t *testing.T, db interface {
	Begin(context.Context) (pgx.Tx, error)
}) pgx.Tx {
	t.Helper()
	ctx := context.Background()
	tx, err := db.Begin(ctx)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, "SELECT 1 FROM fleetlimit.keys WHERE key = 'k' FOR UPDATE")
	require.NoError(t, err)
	return tx
}

// TestPostgresLateCancelSparesTheNextStatement: a heartbeat whose
// context ends while it waits for the key's row lock, which is cancelled
// a second later, and which then finishes on its own before its cancel
// request has reached the database (here the request is held back 1 s),
// must not hand its connection to the next caller: the cancel would stop
// that caller's statement instead.
func TestPostgresLateCancelSparesTheNextStatement(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var cancels atomic.Int32
	pool, p, dsn := poolOf(t, 1, func(cfg *pgxpool.Config) {
		dial := cfg.ConnConfig.DialFunc
		cfg.ConnConfig.DialFunc = func(ctx context.Context, network, addr string) (net.Conn, error) {
			c, err := dial(ctx, network, addr)
			if err != nil {
				return nil, err
			}
			return &slowCancelConn{Conn: c, delay: time.Second, sent: &cancels}, nil
		}
	})
	tx := lockOutside(t, dsn)
	// The cancel request is sent 1 s after the heartbeat's 100 ms and
	// arrives 1 s later; the lock goes between.
	// The count is taken as the lock goes: on a loaded machine the
	// statement may still run a second after its cancel request, and
	// pgx's own cleanup of the cut connection sends a second one.
	unlocked := make(chan error, 1)
	var sentBefore int32
	time.AfterFunc(1600*time.Millisecond, func() {
		sentBefore = cancels.Load()
		unlocked <- tx.Rollback(ctx)
	})
	hctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err := p.Heartbeat(hctx, rep("a", 2, 8, 0, 1, 0))
	cancel()
	require.ErrorIs(t, err, context.DeadlineExceeded)
	require.NoError(t, <-unlocked)
	require.Equal(t, int32(1), sentBefore, "cancel requests sent before the lock went")

	_, err = pool.Exec(ctx, "SELECT pg_sleep(0.5)")
	require.NoError(t, err, "the late cancel request stopped the next caller's statement")
}

// TestPostgresStuckKeySparesOtherKeys: while a session outside the pool
// holds key k's row lock, a node of k heartbeats every 100 ms with a
// 100 ms timeout (each fails) and another key's node shares the pool of
// four connections: the stuck node holds at most one of them, and the
// other key's heartbeats succeed. Each late statement keeping its
// connection, the stuck node held all four.
func TestPostgresStuckKeySparesOtherKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, p, dsn := poolOf(t, 4, nil)
	other := func(seq int64) coord.Report {
		r := rep("b", seq, 8, 0, 1, 0)
		r.Key = "k2"
		return r
	}
	_, err := p.Heartbeat(ctx, other(1))
	require.NoError(t, err)
	tx := lockOutside(t, dsn)

	stop := make(chan struct{})
	var wg sync.WaitGroup
	var stuckFailed atomic.Int32
	wg.Go(func() {
		for seq := int64(2); ; seq++ {
			select {
			case <-stop:
				return
			default:
			}
			hctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
			if _, err := p.Heartbeat(hctx, rep("a", seq, 8, 0, 1, 0)); err != nil {
				stuckFailed.Add(1)
			}
			cancel()
			time.Sleep(100 * time.Millisecond)
		}
	})
	// The stuck node alone: at most one connection, through several
	// rounds of late statements (each stops 1 s after its timeout).
	held := int32(0)
	for start := time.Now(); time.Since(start) < 3*time.Second; {
		held = max(held, pool.Stat().AcquiredConns())
		time.Sleep(5 * time.Millisecond)
	}
	require.LessOrEqual(t, held, int32(1), "connections the stuck node held at once")
	// Beside it, the other key's heartbeats, with a timeout a loaded
	// machine keeps.
	for seq := int64(2); seq < 12; seq++ {
		hctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		_, err := p.Heartbeat(hctx, other(seq))
		cancel()
		require.NoError(t, err, "key k2's heartbeat %d while key k is stuck", seq)
		time.Sleep(50 * time.Millisecond)
	}
	close(stop)
	wg.Wait()
	require.NoError(t, tx.Rollback(ctx))
	require.NotZero(t, stuckFailed.Load())
}

// TestPostgresLateHeartbeatWithinGrace: a heartbeat whose context ends
// while it waits for the key's row lock, and which gets it within its
// grace (as long as its timeout), returns its grant: no cancel request,
// no new connection.
func TestPostgresLateHeartbeatWithinGrace(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, p, tx := lockedKey(t)
	conns := pool.Stat().NewConnsCount()

	unlocked := make(chan error, 1)
	time.AfterFunc(time.Second+300*time.Millisecond, func() { unlocked <- tx.Rollback(ctx) })
	hctx, cancel := context.WithTimeout(ctx, time.Second)
	g, err := p.Heartbeat(hctx, rep("a", 2, 8, 0, 1, 0))
	cancel()
	require.NoError(t, <-unlocked)
	require.NoError(t, err, "the heartbeat finished within its grace")
	require.Equal(t, 8, g.LGlobal)
	require.Equal(t, conns, pool.Stat().NewConnsCount(), "no connection was replaced")
	_, err = pool.Exec(ctx, "SELECT pg_sleep(0.2)")
	require.NoError(t, err, "no cancel request reached the next statement")
}

// slowCancelConn holds back the cancel requests written on it by delay,
// as a slow server or network would, and counts them in sent.
type slowCancelConn struct {
	net.Conn
	delay time.Duration
	sent  *atomic.Int32
	wg    sync.WaitGroup
	once  sync.Once
}

func (c *slowCancelConn) Write(b []byte) (int, error) {
	const cancelRequestCode = 80877102
	if len(b) >= 8 && binary.BigEndian.Uint32(b[4:8]) == cancelRequestCode {
		c.sent.Add(1)
		buf := slices.Clone(b)
		c.wg.Go(func() {
			time.Sleep(c.delay)
			_, _ = c.Conn.Write(buf)
		})
		return len(b), nil
	}
	return c.Conn.Write(b)
}

func (c *slowCancelConn) Close() error {
	c.once.Do(func() {
		go func() {
			c.wg.Wait()
			time.Sleep(50 * time.Millisecond)
			c.Conn.Close()
		}()
	})
	return nil
}

// TestLowerMedianAgrees checks the fold on both implementations: for an even
// count it is the lower of the two middle values.
func TestLowerMedianAgrees(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := fleettest.Pool(t)
	for i, tc := range []struct {
		lLocals []int
		agg     coord.Aggregate
		want    int
	}{
		{[]int{7}, coord.AggregateLowerMedian, 7},
		{[]int{40, 10}, coord.AggregateLowerMedian, 10},
		{[]int{30, 10, 20}, coord.AggregateLowerMedian, 20},
		{[]int{40, 10, 30, 20}, coord.AggregateLowerMedian, 20},
		{[]int{5, 5, 9, 9}, coord.AggregateLowerMedian, 5},
		{[]int{1, 100, 100, 100, 2, 3}, coord.AggregateLowerMedian, 3},
		{[]int{40, 10, 30, 20}, coord.AggregateMin, 10},
	} {
		clock := newFakeClock(t0)
		key := fmt.Sprintf("median-%d", i)
		for _, impl := range []coordinator{coord.NewMemory(clock), newPostgres(t, pool, coord.WithClock(clock))} {
			var g coord.Grant
			for j, l := range tc.lLocals {
				r := rep(fmt.Sprint(j), 1, l, 1, 1, 0) // in flight: every node votes
				r.Key = key
				var err error
				g, err = impl.Heartbeat(ctx, r)
				require.NoError(t, err)
				if j == 0 {
					require.NoError(t, impl.SetAggregate(ctx, key, tc.agg))
				}
			}
			require.Equal(t, tc.want, g.LGlobal, "%T: %v %s", impl, tc.lLocals, tc.agg)
		}
	}
}

// TestPostgresIncarnationAndDurability: a key that last saw another
// incarnation of the database enters learning mode at the next heartbeat;
// a session that sets fleetlimit.cluster — where schemas before 15 kept
// the incarnation's first parts, and which any session may set — still
// computes the database's incarnation, so a value carried over from
// before a restart or a restore cannot hide the loss; and a heartbeat
// commits durably even in a session with synchronous_commit off.
func TestPostgresIncarnationAndDurability(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := fleettest.Pool(t)
	p := newPostgres(t, pool)
	g, err := p.Heartbeat(ctx, rep("a", 1, 8, 2, 4, 0))
	require.NoError(t, err)
	require.False(t, g.Learning)
	var inc string
	require.NoError(t, pool.QueryRow(ctx, `SELECT incarnation FROM fleetlimit.keys WHERE key = 'k'`).Scan(&inc))
	parts := strings.Split(inc, "/")
	require.Len(t, parts, 5, "system id, database, start time, keys table, timeline: %q", inc)

	func() {
		conn, err := pool.Acquire(ctx)
		require.NoError(t, err)
		defer conn.Release() // before the pool closes, whatever fails
		_, err = conn.Exec(ctx, `SET fleetlimit.cluster = 'before-the-restore'`)
		require.NoError(t, err)
		defer func() { _, _ = conn.Exec(ctx, `RESET fleetlimit.cluster`) }() // the pool's next user sees no setting
		var forged string
		require.NoError(t, conn.QueryRow(ctx, `SELECT fleetlimit.incarnation()`).Scan(&forged))
		require.Equal(t, inc, forged, "the session's setting stood in for the database's identity")
	}()

	// As after a failover: the key remembers another incarnation.
	_, err = pool.Exec(ctx, `UPDATE fleetlimit.keys SET incarnation = 'elsewhere' WHERE key = 'k'`)
	require.NoError(t, err)
	g, err = p.Heartbeat(ctx, applied(rep("a", 2, 8, 2, 4, 0), g))
	require.NoError(t, err)
	require.True(t, g.Learning)
	require.Equal(t, 2, g.Share, "no more than the node proves it holds")
	keys, err := p.Keys(ctx)
	require.NoError(t, err)
	require.True(t, keys[0].Learning)

	// An operator forcing learning mode after restoring rows by hand.
	until, err := p.Relearn(ctx, "k")
	require.NoError(t, err)
	require.True(t, until.After(time.Now()))
	_, err = p.Relearn(ctx, "no such key")
	require.ErrorIs(t, err, coord.ErrUnknownKey)

	tx, err := pool.Begin(ctx)
	require.NoError(t, err)
	defer tx.Rollback(ctx)
	_, err = tx.Exec(ctx, `SET LOCAL synchronous_commit = off`)
	require.NoError(t, err)
	_, err = tx.Exec(ctx, `SELECT * FROM fleetlimit.heartbeat('k', 'b', 'b-1', 1, 8, 0, 1, 0, 0, 2000000, 0)`)
	require.NoError(t, err)
	var sc string
	require.NoError(t, tx.QueryRow(ctx, `SELECT current_setting('synchronous_commit')`).Scan(&sc))
	require.Equal(t, "local", sc, "the heartbeat's transaction commits durably")
}

// TestPostgresWithoutSchema: on a database never migrated every call
// fails with ErrSchema, whose message says what to run.
func TestPostgresWithoutSchema(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool, err := pgxpool.New(ctx, fleettest.EmptyDSN(t))
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	p := newPostgres(t, pool)
	_, err = p.Heartbeat(ctx, rep("a", 1, 4, 0, 1, 0))
	require.ErrorIs(t, err, coord.ErrSchema)
	require.ErrorContains(t, err, "fleetctl migrate up")
	_, err = p.Keys(ctx)
	require.ErrorIs(t, err, coord.ErrSchema)
	require.ErrorIs(t, p.Drain(ctx, "k", "a"), coord.ErrSchema)
}

// TestApportionAgrees: fleetlimit.apportion and the core's apportion give
// every claim the same part, and the parts add up to the total.
func TestApportionAgrees(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := fleettest.Pool(t)
	rng := rand.New(rand.NewPCG(7, 7))
	ids := []string{"a", "B", "é", "a/1", "ab", "Z", "b"}
	for range 200 {
		n := 1 + rng.IntN(6)
		total := rng.Int64N(30)
		if rng.IntN(4) == 0 {
			total = rng.Int64N(coord.MaxRate + 1)
		}
		wants, nodes, insts := make([]int64, n), make([]string, n), make([]string, n)
		for i := range n {
			wants[i] = 1 + rng.Int64N(5)
			if rng.IntN(4) == 0 {
				wants[i] = 1 + rng.Int64N(coord.MaxRate)
			}
			nodes[i] = ids[rng.IntN(len(ids))]
			insts[i] = fmt.Sprintf("%s/%d", nodes[i], i)
		}
		var sum int64
		for i := range n {
			others := func(s []int64) []int64 { return slices.Delete(slices.Clone(s), i, i+1) }
			otherS := func(s []string) []string { return slices.Delete(slices.Clone(s), i, i+1) }
			want := coord.Apportion(total, wants[i], nodes[i], insts[i], others(wants), otherS(nodes), otherS(insts))
			var got int64
			require.NoError(t, pool.QueryRow(ctx, `SELECT fleetlimit.apportion($1, $2, $3, $4, $5, $6, $7)`,
				total, wants[i], nodes[i], insts[i], others(wants), otherS(nodes), otherS(insts)).Scan(&got))
			require.Equal(t, want, got, "total %d, claim %d of %v %v %v", total, i, wants, nodes, insts)
			sum += want
		}
		require.Equal(t, total, sum, "total %d split among %v", total, wants)
	}
}

// TestPostgresPartitionHealsWithinTheCut: a node beating every 100 ms
// (timeout 100 ms; 1 s after the heal) through a 5 s partition, on a pool of one connection,
// heartbeats again at most a couple of seconds after the heal — once its
// last late statement has been cut. A pool that destroys a cut connection
// holds its slot until pgx's cleanup gives up on the database, 15 s: the
// first heartbeat succeeded 12 s after the heal.
func TestPostgresPartitionHealsWithinTheCut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	var partitioned *atomic.Bool
	_, p, _ := poolOf(t, 1, func(cfg *pgxpool.Config) {
		partitioned = partitionProxy(t, cfg.ConnConfig)
		cfg.ConnConfig.ConnectTimeout = time.Second
	})

	beat := func(seq int64, timeout time.Duration) error {
		hctx, cancel := context.WithTimeout(ctx, timeout)
		defer cancel()
		_, err := p.Heartbeat(hctx, rep("a", seq, 8, 0, 1, 0))
		return err
	}
	partitioned.Store(true)
	seq := int64(2)
	for start := time.Now(); time.Since(start) < 5*time.Second; seq++ {
		require.Error(t, beat(seq, 100*time.Millisecond))
		time.Sleep(100 * time.Millisecond)
	}
	partitioned.Store(false)
	healed := time.Now()
	// After the heal a heartbeat may take a new connection's dial and
	// authentication on a loaded machine: a second each, well inside the
	// 8s that a slot held until pgx gives up (15s) would exceed.
	for ; beat(seq, time.Second) != nil; seq++ {
		require.Less(t, time.Since(healed), 8*time.Second, "no heartbeat succeeded after the heal")
		time.Sleep(100 * time.Millisecond)
	}
	t.Logf("the first heartbeat after the heal succeeded %v after it", time.Since(healed).Round(time.Millisecond))
}

// partitionProxy points cc at a proxy on 127.0.0.1 to its server and
// returns the switch of a partition: while it is on, the bytes of
// connections opened before are held (and delivered once it is off), and
// connections opened during it never carry anything, as if their SYNs
// were lost. The proxy closes at cleanup.
func partitionProxy(t *testing.T, cc *pgx.ConnConfig) *atomic.Bool {
	t.Helper()
	network, target := "tcp", net.JoinHostPort(cc.Host, fmt.Sprint(cc.Port))
	if strings.HasPrefix(cc.Host, "/") {
		network, target = "unix", fmt.Sprintf("%s/.s.PGSQL.%d", cc.Host, cc.Port)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	t.Cleanup(func() { _ = ln.Close() })
	var partitioned atomic.Bool
	pipe := func(dst, src net.Conn, dead bool) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if err != nil {
				_ = dst.Close()
				return
			}
			if dead {
				continue
			}
			for partitioned.Load() {
				time.Sleep(2 * time.Millisecond)
			}
			if _, err := dst.Write(buf[:n]); err != nil {
				_ = src.Close()
				return
			}
		}
	}
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			dead := partitioned.Load()
			s, err := net.Dial(network, target)
			if err != nil {
				_ = c.Close()
				continue
			}
			go pipe(s, c, dead)
			go pipe(c, s, dead)
		}
	}()
	cc.Host, cc.Port = "127.0.0.1", uint16(ln.Addr().(*net.TCPAddr).Port)
	cc.Fallbacks, cc.TLSConfig = nil, nil
	return &partitioned
}

// TestPostgresUncheckedKeys: with the database's record deleted by hand,
// a key that recorded another incarnation is still unchecked (incarnate
// re-creates the record and the key learns) and a key that recorded none
// is not; and a listing that has used unchecked_keys lists on without it
// once a rollback drops it.
func TestPostgresUncheckedKeys(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	pool := fleettest.Pool(t)
	p := newPostgres(t, pool)
	_, err := p.Heartbeat(ctx, rep("a", 1, 8, 2, 4, 0))
	require.NoError(t, err)
	require.NoError(t, p.CreateKey(ctx, "never", nil, nil))
	_, err = pool.Exec(ctx, `UPDATE fleetlimit.keys SET incarnation = 'elsewhere' WHERE key = 'k';
		DELETE FROM fleetlimit.database_state`)
	require.NoError(t, err)
	keys, err := p.Keys(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"k", "never"}, []string{keys[0].Key, keys[1].Key})
	require.True(t, keys[0].Unchecked)
	require.False(t, keys[1].Unchecked, "the re-created record is of this incarnation, not learning")
	g, err := p.Heartbeat(ctx, rep("a", 2, 8, 2, 4, 0))
	require.NoError(t, err)
	require.True(t, g.Learning)

	require.NoError(t, migrations.DownTo(ctx, pool, 13)) // before unchecked_keys
	keys, err = p.Keys(ctx)
	require.NoError(t, err, "the listing that used unchecked_keys lists without it")
	require.Len(t, keys, 2)
	require.False(t, keys[0].Unchecked || keys[1].Unchecked)
	require.NoError(t, migrations.Up(ctx, pool))
}
