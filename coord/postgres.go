package coord

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Postgres is a Coordinator and Admin backed by the fleetlimit schema (see
// package migrations). Each call is one SQL statement: one round trip and
// one transaction. A heartbeat is a call of fleetlimit.heartbeat_waiting,
// the SQL twin of State.Heartbeat; its lease clock is the database's now(), never
// the caller's. It is safe for concurrent use; calls on one key serialize on
// the key's row lock in the database, calls on different keys do not.
type Postgres struct {
	pool  *pgxpool.Pool
	clock Clock // nil: the database's now()

	// skipValidation sends reports to the database unchecked, so tests can
	// exercise the function's own checks.
	skipValidation bool

	// checksKeys caches that this session may run unchecked_keys (see
	// Keys).
	checksKeys atomic.Bool

	lateMu sync.Mutex
	// late holds, per key and node ID, the stopped channel of the node's
	// heartbeat whose call gave up while its statement ran on; the
	// node's next heartbeat waits for it (see Heartbeat).
	late map[string]chan struct{}
}

var (
	_ Coordinator = (*Postgres)(nil)
	_ Admin       = (*Postgres)(nil)
)

// maxAttempts bounds the retries of a call that hit a transient conflict.
const maxAttempts = 5

// PostgresOption configures NewPostgres.
type PostgresOption func(*Postgres) error

// WithClock makes the coordinator pass c's time to the database as "now"
// instead of letting it use now(). It is for tests only: it lets a test run
// the Postgres coordinator on a fake clock, in lockstep with Memory. In
// production the lease clock must be the database's. A nil clock is an
// error.
func WithClock(c Clock) PostgresOption {
	return func(p *Postgres) error {
		if c == nil {
			return errors.New("WithClock: nil clock")
		}
		p.clock = c
		return nil
	}
}

// NewPostgres returns a coordinator using pool. The schema must have been
// migrated (migrations.Up). It returns an error for a nil pool or an
// invalid option.
func NewPostgres(pool *pgxpool.Pool, opts ...PostgresOption) (*Postgres, error) {
	if pool == nil {
		return nil, errors.New("coord: new postgres: nil pool")
	}
	p := &Postgres{pool: pool}
	for _, opt := range opts {
		if err := opt(p); err != nil {
			return nil, fmt.Errorf("coord: new postgres: %w", err)
		}
	}
	return p, nil
}

// stmt returns t's form for this coordinator and its arguments: args, and
// the test clock's time last when one is set.
func (p *Postgres) stmt(t timed, args ...any) (string, []any) {
	if p.clock != nil {
		args = append(args, p.now())
	}
	return p.form(t), args
}

// form is t's production form, or its test form under a test clock.
func (p *Postgres) form(t timed) string {
	if p.clock == nil {
		return t.prod
	}
	return t.test
}

// now is the "now" parameter: NULL unless a test clock is set.
func (p *Postgres) now() *time.Time {
	if p.clock == nil {
		return nil
	}
	t := instant(p.clock)
	return &t
}

// Heartbeat records r and returns the node's grant, in one call of
// fleetlimit.heartbeat_waiting (fleetlimit.heartbeat, the rate rule, then
// the count of the members waiting, Grant.Waiting). It returns errors
// wrapping ErrInvalidReport or ErrNodeIDInUse as State.Heartbeat does, and
// "coord: heartbeat: ..." around database errors. A transient conflict,
// or a race with the key's forced deletion (see retryable), is retried up
// to 5 times. When ctx ends while the statement runs, the
// statement may still finish for as long as ctx gave the call (at most
// 1 s), and its grant is returned; past that the call returns an error
// wrapping ctx's and ErrOutcomeUnknown (the report may yet be recorded),
// and the statement keeps its connection until it has
// stopped, cancelled in the database if it still runs 1 s after ctx
// ended (see queryRow). A node's next heartbeat waits for such a
// statement to stop before it takes a connection (an error wrapping ctx's
// if ctx ends first): a node keeps at most one statement running, however
// long its key's row lock is held, and the connections left serve the
// other keys.
func (p *Postgres) Heartbeat(ctx context.Context, r Report) (Grant, error) {
	if !p.skipValidation {
		if err := r.Validate(); err != nil {
			return Grant{}, fmt.Errorf("coord: heartbeat: %w", err)
		}
	}
	labels := maps.Clone(r.Labels) // the statement may outlive the call
	if labels == nil {
		labels = map[string]string{}
	}
	var (
		g       Grant
		leaseUS int64
		status  string
		peer    int64
		err     error
	)
	node, grace := r.Key+"\x00"+r.NodeID, graceOf(ctx)
	if err := p.awaitLate(ctx, node); err != nil {
		return Grant{}, pgError("heartbeat", err)
	}
	err = retrying(func() error {
		sql, args := p.stmt(sqlHeartbeat,
			r.Key, r.NodeID, r.Instance, r.Seq, r.LLocal, r.Inflight, r.Demand, r.Epoch, r.AppliedGen,
			micros(leaseTTL(r)), micros(requestBound(r)), labels, r.RateLocal.Requests, r.RateLocal.Tokens,
			r.RateDemand.Requests, r.RateDemand.Tokens, r.RateApplied.Requests, r.RateApplied.Tokens,
			r.RateUsed.Requests, r.RateUsed.Tokens)
		return p.queryRow(ctx, node, grace, true, sql, args, &g.Share, &g.LGlobal, &g.Epoch, &g.Generation, &leaseUS, &status, &g.Learning, &peer,
			&g.LiveNodes, &g.Stale, &g.Rate.Requests, &g.Rate.Tokens, &g.RateShare.Requests, &g.RateShare.Tokens, &g.Waiting)
	})
	if err != nil {
		return Grant{}, pgError("heartbeat", err)
	}
	g.LeaseRemaining = time.Duration(leaseUS) * time.Microsecond
	g.Status = Status(status)
	g.PeerInflight = int(peer)
	return g, nil
}

// graceOf is the grace runLate gives a statement whose ctx ended: as long
// as ctx gives the call from now, at most maxCancelGrace.
func graceOf(ctx context.Context) time.Duration {
	if deadline, ok := ctx.Deadline(); ok {
		return min(maxCancelGrace, max(time.Until(deadline), time.Millisecond))
	}
	return maxCancelGrace
}

// maxCancelGrace is how long after its context ended a statement may run
// before the database is asked to cancel it, and how long it then has to
// stop before its connection is cut (see queryRow and runLate).
const maxCancelGrace = time.Second

// cancelRequestBound bounds a cancel request's own round trip (a new
// connection, which a loaded server may be slow to take).
const cancelRequestBound = 5 * time.Second

// queryRow runs one statement on a connection of the pool and scans its
// row into dest, which holds pointers. If ctx ends while the statement
// runs, the statement has a grace (at most maxCancelGrace; see graceOf)
// to finish: its row is then returned as if in time.
// Past the grace the call returns an error wrapping ctx's (and, with
// writes, ErrOutcomeUnknown: its change may yet be made), and the
// statement keeps its connection and runs on; its result is dropped, and
// the connection goes back to the pool once it has stopped. One still
// running maxCancelGrace after ctx ended (blocked behind a lock a stuck
// session holds, or on a database that stopped answering) is cancelled:
// the database is asked to (a cancel request on a connection of its own),
// and the connection goes back to the pool if the cancel stopped the
// statement (SQLSTATE 57014, which consumes the request, once the request
// has been answered: up to cancelRequestBound). Any other end
// after a cancel request leaves the request's effect unknown (it could
// cancel the connection's next statement, another caller's), so that
// connection is closed, as is one whose statement has not stopped
// maxCancelGrace after the request; a closed connection leaves the pool
// at once.
//
// A late statement is let finish rather than cancelled or cut because
// both cost the database more than the statement: a cancel request forks
// a backend, a cut connection a new backend that loads its caches again,
// and a statement cancelled after it waited for the key's row lock wastes
// its turn. On a key whose heartbeats come near what the database serves,
// each late heartbeat then makes the next ones later, and every heartbeat
// times out for good.
//
// A statement whose call gave up is recorded under node until it stops
// (see awaitLate), unless node is "". With no dest the statement's
// result, whatever it returns, is discarded.
func (p *Postgres) queryRow(ctx context.Context, node string, grace time.Duration, writes bool, sql string, args []any, dest ...any) error {
	var row []any
	if len(dest) > 0 {
		row = make([]any, len(dest))
	}
	for i, d := range dest {
		row[i] = reflect.New(reflect.TypeOf(d).Elem()).Interface()
	}
	err := p.runLate(ctx, node, grace, writes, func(qctx context.Context, conn *pgxpool.Conn) error {
		if row == nil {
			_, err := conn.Exec(qctx, sql, args...)
			return err
		}
		return conn.QueryRow(qctx, sql, args...).Scan(row...)
	})
	if err != nil {
		return err
	}
	for i, d := range dest {
		reflect.ValueOf(d).Elem().Set(reflect.ValueOf(row[i]).Elem())
	}
	return nil
}

// queryRows runs one query as queryRow does (a grace, then a cancel; the
// connection kept until the query stops) and returns its rows, each read
// by scan: the listings of Keys and Nodes.
func queryRows[T any](ctx context.Context, p *Postgres, sql string, args []any, scan pgx.RowToFunc[T]) ([]T, error) {
	var out []T
	err := p.runLate(ctx, "", graceOf(ctx), false, func(qctx context.Context, conn *pgxpool.Conn) error {
		rows, err := conn.Query(qctx, sql, args...)
		if err != nil {
			return err
		}
		got, err := pgx.CollectRows(rows, scan)
		out = got // read by the caller only once this has returned
		return err
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// runLate runs do on a connection of the pool, on a context of its own,
// with queryRow's handling of a ctx that ends first. do's results must go
// to memory the caller reads only after runLate has returned nil.
func (p *Postgres) runLate(ctx context.Context, node string, grace time.Duration, writes bool, do func(context.Context, *pgxpool.Conn) error) error {
	conn, err := p.pool.Acquire(ctx)
	if err != nil {
		return err
	}
	st := &statement{p: p, node: node, conn: conn, done: make(chan error, 1), stopped: make(chan struct{})}
	st.qctx, st.cut = context.WithCancel(context.WithoutCancel(ctx))
	go st.run(do)

	select {
	case err = <-st.done:
	case <-ctx.Done():
		timer := time.NewTimer(grace)
		select {
		case err = <-st.done:
			timer.Stop()
		case <-timer.C:
			if node != "" {
				p.recordLate(node, st.stopped)
			}
			time.AfterFunc(maxCancelGrace-grace, st.cancel)
			if writes {
				return fmt.Errorf("%w: %w (%v after the context ended)", ctx.Err(), ErrOutcomeUnknown, grace)
			}
			return fmt.Errorf("%w (the statement was still running %v later)", ctx.Err(), grace)
		}
	}
	if err != nil && ctx.Err() != nil {
		return fmt.Errorf("%w (%w)", ctx.Err(), err)
	}
	return err
}

// awaitLate waits until the statement recorded under node, if any, has
// stopped, or ctx ends.
func (p *Postgres) awaitLate(ctx context.Context, node string) error {
	p.lateMu.Lock()
	stopped := p.late[node]
	p.lateMu.Unlock()
	if stopped == nil {
		return nil
	}
	select {
	case <-stopped: // its run forgets it
		return nil
	case <-ctx.Done():
		return fmt.Errorf("%w (the node's previous heartbeat is still running)", ctx.Err())
	}
}

// recordLate records stopped under node, unless it is closed already (its
// statement has stopped, and forgetLate has run).
func (p *Postgres) recordLate(node string, stopped chan struct{}) {
	p.lateMu.Lock()
	defer p.lateMu.Unlock()
	select {
	case <-stopped:
	default:
		if p.late == nil {
			p.late = make(map[string]chan struct{})
		}
		p.late[node] = stopped
	}
}

// forgetLate removes node's record if it is still stopped; run calls it
// once stopped is closed.
func (p *Postgres) forgetLate(node string, stopped chan struct{}) {
	p.lateMu.Lock()
	if p.late[node] == stopped {
		delete(p.late, node)
	}
	p.lateMu.Unlock()
}

// statement is one statement of runLate on its connection, which it
// gives back to the pool once the statement has stopped.
type statement struct {
	p       *Postgres
	node    string
	stopped chan struct{} // closed once the connection is back in the pool or taken out of it
	conn    *pgxpool.Conn
	qctx    context.Context
	cut     context.CancelFunc // ends the statement by closing its connection
	done    chan error         // the statement's result, once

	mu        sync.Mutex
	ended     bool          // the statement has stopped
	requested chan struct{} // non-nil once a cancel request is sent; closed when it is answered
	cancelErr error         // the cancel request's error, once requested is closed
}

// run runs the statement (do, on the statement's own context and
// connection) and reports its result on done. A statement no cancel
// request was sent for gives the connection back to the pool first, so
// the caller's next statement can take the same one. Otherwise the
// connection goes back after the result — or, if the statement did not
// stop with 57014 (or the request failed), is taken out of the pool and
// closed.
func (st *statement) run(do func(context.Context, *pgxpool.Conn) error) {
	defer st.p.forgetLate(st.node, st.stopped)
	defer close(st.stopped)
	defer st.cut()
	err := do(st.qctx, st.conn)
	st.mu.Lock()
	st.ended = true
	requested := st.requested
	st.mu.Unlock()
	if requested == nil {
		st.conn.Release()
		st.done <- err
		return
	}
	st.done <- err
	// A statement the cancel stopped waits for the request's answer; one
	// that ended otherwise, or was cut, leaves the request's effect unknown.
	var pgErr *pgconn.PgError
	consumed := false
	if errors.As(err, &pgErr) && pgErr.Code == sqlstateQueryCanceled {
		<-requested
		consumed = st.cancelErr == nil
	}
	if consumed {
		st.conn.Release()
		return
	}
	// Taken out of the pool, the connection gives its slot back at once:
	// the pool would hold the slot while it destroys the connection, and
	// pgx's cleanup of a cut one waits for the database up to 15 s.
	conn := st.conn.Hijack()
	go func() {
		closeCtx, cancel := context.WithTimeout(context.Background(), maxCancelGrace)
		defer cancel()
		_ = conn.Close(closeCtx)
	}()
}

// cancel asks the database to cancel the statement unless it has already
// stopped, and cuts its connection if it has not stopped maxCancelGrace
// later. It is called once, from a timer.
func (st *statement) cancel() {
	st.mu.Lock()
	if st.ended {
		st.mu.Unlock()
		return
	}
	requested := make(chan struct{})
	st.requested = requested
	pgConn := st.conn.Conn().PgConn() // while ended is false, run holds the connection
	st.mu.Unlock()
	time.AfterFunc(maxCancelGrace, st.cut)
	go func() {
		defer close(requested)
		cctx, cancel := context.WithTimeout(context.Background(), cancelRequestBound)
		defer cancel()
		err := pgConn.CancelRequest(cctx) // failing, the cut ends the statement
		if err == nil {
			err = cctx.Err()
		}
		st.cancelErr = err
	}()
}

// Leave ends the instance's membership, in one call of fleetlimit.leave
// (see State.Leave). It returns ErrInvalidReport, ErrUnknownKey or
// ErrUnknownNode, wrapped. A ctx that ends while the statement runs is
// handled as Heartbeat's (a grace, then a cancel; the connection is kept
// until the statement stops), so the call may return up to 1 s after ctx
// ends; so it is in every other call: the listings of Keys and Nodes,
// and CreateKey's transaction with rates, included. Past the grace, a call
// that changes something (not the listings and checks) returns an error
// wrapping ErrOutcomeUnknown too.
func (p *Postgres) Leave(ctx context.Context, d Departure) error {
	if !p.skipValidation {
		if err := d.Validate(); err != nil {
			return fmt.Errorf("coord: leave: %w", err)
		}
	}
	sql, args := p.stmt(sqlLeave, d.Key, d.NodeID, d.Instance, d.Inflight, micros(d.Hold.Truncate(time.Microsecond)))
	return p.exec(ctx, "leave", sql, args...)
}

// valueOf copies the int v points to (nil stays nil): a statement's
// arguments must not be the caller's, for the statement may outlive the
// call (see queryRow).
func valueOf(v *int) *int {
	if v == nil {
		return nil
	}
	c := *v
	return &c
}

// micros is d in whole microseconds.
func micros(d time.Duration) int64 { return int64(d / time.Microsecond) }

// Keys lists every key, sorted by name (byte order). A ctx that ends while
// the query runs is handled as Heartbeat's, as in Nodes: a grace, within
// which the rows may still be returned, then a cancel, the connection
// kept until the query stops. KeyInfo.Unchecked comes from
// fleetlimit.unchecked_keys() where the session may run it (schema
// version 14 on, an operator's rights as grant gives them); elsewhere
// every key reads as checked. Until a listing has used it, a first
// statement asks whether it may; a listing that finds it gone (a
// rollback, a revoke) lists again without it.
func (p *Postgres) Keys(ctx context.Context) ([]KeyInfo, error) {
	checks := p.checksKeys.Load()
	if !checks {
		if err := p.read(ctx, p.form(sqlChecksKeys), nil, &checks); err != nil {
			return nil, pgError("keys", err)
		}
	}
	out, err := p.keys(ctx, checks)
	if checks && uncheckedKeysGone(err) {
		checks = false
		out, err = p.keys(ctx, false)
	}
	p.checksKeys.Store(checks)
	if err != nil {
		return nil, pgError("keys", err)
	}
	return out, nil
}

// uncheckedKeysGone reports whether err says the session may no longer
// run unchecked_keys: the function is missing, or its right was taken.
func uncheckedKeysGone(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && (pgErr.Code == "42883" || pgErr.Code == "42501") &&
		strings.Contains(pgErr.Message, "unchecked_keys")
}

// keys runs the key listing, with each key's Unchecked when checks.
func (p *Postgres) keys(ctx context.Context, checks bool) ([]KeyInfo, error) {
	sql := sqlKeysUnknown
	if checks {
		sql = p.form(sqlKeys)
	}
	return queryRows(ctx, p, sql, []any{p.now()}, func(row pgx.CollectableRow) (KeyInfo, error) {
		var (
			ki                    KeyInfo
			agg                   string
			learning              *time.Time
			live, share, inflight int64
			heldRows, heldReserve int64
			evictions             int64
		)
		err := row.Scan(&ki.Key, &ki.LGlobal, &ki.MinLimit, &ki.MaxLimit, &agg, &ki.Epoch, &ki.Generation,
			&learning, &ki.Learning, &ki.CreatedAt, &ki.Drains, &evictions, &live, &share, &inflight, &heldRows, &heldReserve,
			&ki.RateLimit.Requests, &ki.RateLimit.Tokens, &ki.Rate.Requests, &ki.Rate.Tokens,
			&ki.SumRateShare.Requests, &ki.SumRateShare.Tokens, &ki.SumRateUsed.Requests, &ki.SumRateUsed.Tokens,
			&ki.Unchecked)
		ki.Aggregate = Aggregate(agg)
		if learning != nil {
			ki.LearningUntil = *learning
		}
		ki.LiveNodes, ki.SumShare, ki.SumInflight = int(live), int(share), int(inflight)
		ki.HeldRows, ki.HeldReserve, ki.Evictions = int(heldRows), int(heldReserve), int(evictions)
		return ki, err
	})
}

// Nodes lists every row of key, sorted by node id (byte order). It returns
// ErrUnknownKey, wrapped, for a key without a row. A ctx that ends while
// the query runs is handled as Heartbeat's: the rows may still be
// returned if the query ends within the grace.
func (p *Postgres) Nodes(ctx context.Context, key string) ([]NodeInfo, error) {
	if err := storable(key, "-"); err != nil {
		return nil, fmt.Errorf("coord: nodes: %w", err)
	}
	out, err := queryRows(ctx, p, sqlNodes, []any{key, p.now()}, func(row pgx.CollectableRow) (NodeInfo, error) {
		var (
			n   NodeInfo
			now time.Time
		)
		err := row.Scan(&now, &n.NodeID, &n.Instance, &n.Seq, &n.LLocal, &n.Inflight, &n.Demand, &n.Share,
			&n.Epoch, &n.GrantedGen, &n.AppliedGen, &n.UnackedHigh, &n.LeaseExpiresAt, &n.HoldUntil,
			&n.Draining, &n.Evicted, &n.Departed, &n.JoinedAt, &n.HeartbeatAt, &n.Labels, &n.Measuring,
			&n.RateLocal.Requests, &n.RateLocal.Tokens, &n.RateDemand.Requests, &n.RateDemand.Tokens,
			&n.RateShare.Requests, &n.RateShare.Tokens, &n.RateHigh.Requests, &n.RateHigh.Tokens,
			&n.RateUsed.Requests, &n.RateUsed.Tokens)
		return describe(key, n.NodeState, now), err
	})
	if err != nil {
		return nil, pgError("nodes", err)
	}
	if len(out) == 0 {
		var exists bool
		if err := p.read(ctx, sqlKeyExists, []any{key}, &exists); err != nil {
			return nil, pgError("nodes", err)
		}
		if !exists {
			return nil, fmt.Errorf("coord: nodes: %w: %.40q", ErrUnknownKey, key)
		}
	}
	return out, nil
}

// Drain implements Admin.Drain; see State.Drain.
func (p *Postgres) Drain(ctx context.Context, key, nodeID string) error {
	return p.nodeOp(ctx, "drain", sqlDrain, key, nodeID)
}

// Undrain implements Admin.Undrain; see State.Undrain.
func (p *Postgres) Undrain(ctx context.Context, key, nodeID string) error {
	return p.nodeOp(ctx, "undrain", sqlUndrain, key, nodeID)
}

// Evict implements Admin.Evict; see State.Evict.
func (p *Postgres) Evict(ctx context.Context, key, nodeID string) error {
	return p.nodeOp(ctx, "evict", sqlEvict, key, nodeID)
}

// SetLimits implements Admin.SetLimits; see State.SetLimits.
func (p *Postgres) SetLimits(ctx context.Context, key string, minLimit, maxLimit *int) error {
	if err := validateLimits(minLimit, maxLimit); err != nil {
		return fmt.Errorf("coord: set limits: %w", err)
	}
	if err := storable(key, "-"); err != nil {
		return fmt.Errorf("coord: set limits: %w", err)
	}
	return p.exec(ctx, "set limits", sqlSetLimits, key, valueOf(minLimit), valueOf(maxLimit))
}

// SetAggregate implements Admin.SetAggregate; see State.SetAggregate.
func (p *Postgres) SetAggregate(ctx context.Context, key string, a Aggregate) error {
	if err := validateAggregate(a); err != nil {
		return fmt.Errorf("coord: set aggregate: %w", err)
	}
	if err := storable(key, "-"); err != nil {
		return fmt.Errorf("coord: set aggregate: %w", err)
	}
	return p.exec(ctx, "set aggregate", sqlSetAggr, key, string(a))
}

// SetRates implements Admin.SetRates in one call of fleetlimit.set_rates.
func (p *Postgres) SetRates(ctx context.Context, key string, c RatesChange) (Rates, error) {
	if err := c.validate(); err != nil {
		return Rates{}, fmt.Errorf("coord: set rates: %w", err)
	}
	if err := storable(key, "-"); err != nil {
		return Rates{}, fmt.Errorf("coord: set rates: %w", err)
	}
	var out Rates
	err := p.call(ctx, sqlSetRates, []any{key, c.SetRequests, c.Requests, c.SetTokens, c.Tokens}, &out.Requests, &out.Tokens)
	if err != nil {
		return Rates{}, pgError("set rates", err)
	}
	return out, nil
}

// Relearn implements Admin.Relearn; see State.Relearn.
func (p *Postgres) Relearn(ctx context.Context, key string) (time.Time, error) {
	if err := storable(key, "-"); err != nil {
		return time.Time{}, fmt.Errorf("coord: relearn: %w", err)
	}
	var until time.Time
	sql, args := p.stmt(sqlRelearn, key)
	if err := p.call(ctx, sql, args, &until); err != nil {
		return time.Time{}, pgError("relearn", err)
	}
	return until, nil
}

// UpdateLimits implements Admin.UpdateLimits in one call of
// fleetlimit.update_limits.
func (p *Postgres) UpdateLimits(ctx context.Context, key string, c LimitsChange) (minLimit, maxLimit *int, err error) {
	minSet, maxSet := pick(c.SetMin, c.Min), pick(c.SetMax, c.Max) // an unset bound's pointer is ignored
	if err := validateLimits(minSet, maxSet); err != nil {
		return nil, nil, fmt.Errorf("coord: update limits: %w", err)
	}
	if err := storable(key, "-"); err != nil {
		return nil, nil, fmt.Errorf("coord: update limits: %w", err)
	}
	err = p.call(ctx, sqlUpdateLimits, []any{key, c.SetMin, valueOf(minSet), c.SetMax, valueOf(maxSet)}, &minLimit, &maxLimit)
	if err != nil {
		return nil, nil, pgError("update limits", err)
	}
	return minLimit, maxLimit, nil
}

// CreateKey implements Admin.CreateKey: one call of fleetlimit.create_key,
// and with rates (WithRates) a call of fleetlimit.set_rates in the same
// transaction.
func (p *Postgres) CreateKey(ctx context.Context, key string, minLimit, maxLimit *int, opts ...KeyOption) error {
	o, err := newKeyOptions(key, minLimit, maxLimit, opts)
	if err != nil {
		return err
	}
	sql, args := p.stmt(sqlCreateKey, key, valueOf(minLimit), valueOf(maxLimit))
	if o.rates.IsZero() {
		return p.exec(ctx, "create key", sql, args...)
	}
	c := o.ratesChange()
	err = retrying(func() error {
		return p.runLate(ctx, "", graceOf(ctx), true, func(qctx context.Context, conn *pgxpool.Conn) error {
			return pgx.BeginFunc(qctx, conn, func(tx pgx.Tx) error {
				if _, err := tx.Exec(qctx, sql, args...); err != nil {
					return err
				}
				_, err := tx.Exec(qctx, sqlSetRates, key, c.SetRequests, c.Requests, c.SetTokens, c.Tokens)
				return err
			})
		})
	})
	if err != nil {
		return pgError("create key", err)
	}
	return nil
}

// DeleteKey implements Admin.DeleteKey.
func (p *Postgres) DeleteKey(ctx context.Context, key string, force bool) error {
	if err := storable(key, "-"); err != nil {
		return fmt.Errorf("coord: delete key: %w", err)
	}
	sql, args := p.stmt(sqlDeleteKey, key, force)
	return p.exec(ctx, "delete key", sql, args...)
}

// CheckSchema reports whether the database's fleetlimit schema is at the
// version this library needs (SchemaVersion): ErrSchema, saying which it
// is at and what to run, when it is missing or older.
func (p *Postgres) CheckSchema(ctx context.Context) error {
	var v int
	if err := p.read(ctx, sqlSchemaVer, nil, &v); err != nil {
		return pgError("check schema", err)
	}
	if v < SchemaVersion {
		return fmt.Errorf("coord: check schema: %w: the database is at version %d, this library needs %d",
			ErrSchema, v, SchemaVersion)
	}
	return nil
}

func (p *Postgres) nodeOp(ctx context.Context, op string, t timed, key, nodeID string) error {
	if err := storable(key, nodeID); err != nil {
		return fmt.Errorf("coord: %s: %w", op, err)
	}
	sql, args := p.stmt(t, key, nodeID)
	return p.exec(ctx, op, sql, args...)
}

// call is queryRow for a call that is no node's heartbeat and may change
// something: the grace is graceOf(ctx), and a late statement is recorded
// under no node.
func (p *Postgres) call(ctx context.Context, sql string, args []any, dest ...any) error {
	return p.queryRow(ctx, "", graceOf(ctx), true, sql, args, dest...)
}

// read is call for a statement that changes nothing: a late one's error
// does not wrap ErrOutcomeUnknown.
func (p *Postgres) read(ctx context.Context, sql string, args []any, dest ...any) error {
	return p.queryRow(ctx, "", graceOf(ctx), false, sql, args, dest...)
}

// exec runs one statement that returns nothing the caller reads, with
// queryRow's handling of a ctx that ends while it runs (a grace, then a
// cancel, the connection kept until the statement stops), retrying a
// transient conflict up to maxAttempts times; op names it in the error.
func (p *Postgres) exec(ctx context.Context, op, sql string, args ...any) error {
	if err := retrying(func() error { return p.call(ctx, sql, args) }); err != nil {
		return pgError(op, err)
	}
	return nil
}

// retrying runs fn until it succeeds, fails with an error that is not a
// transient conflict, or has run maxAttempts times, and returns its last
// error.
func retrying(fn func() error) error {
	for attempt := 1; ; attempt++ {
		err := fn()
		if err == nil || !retryable(err) || attempt == maxAttempts {
			return err
		}
	}
}

// storable reports, as ErrUnknownKey or ErrUnknownNode, a key or node id
// that no row can hold, so it is never sent to the database (which would
// refuse a NUL byte or invalid UTF-8 with an encoding error).
func storable(key, nodeID string) error {
	if !ValidName(key) {
		return fmt.Errorf("%w: %.40q", ErrUnknownKey, key)
	}
	if !ValidName(nodeID) {
		return fmt.Errorf("%w: %.40q on key %.40q", ErrUnknownNode, nodeID, key)
	}
	return nil
}
