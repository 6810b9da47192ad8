package chaos

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	toxiproxy "github.com/Shopify/toxiproxy/v2"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetlimit/fleetlimit/internal/pgtemp"
	"github.com/fleetlimit/fleetlimit/migrations"
)

// pgSettings make the cluster durable (fsync on) and able to stream to a
// replica.
var pgSettings = map[string]string{
	"fsync":              "on",
	"synchronous_commit": "on",
	"full_page_writes":   "on",
	"wal_level":          "replica",
	"max_wal_senders":    "10",
	"wal_keep_size":      "256MB",
	"hot_standby":        "on",
}

// createKey creates the key's row with the operator's max before any node
// starts.
// TODO: replace with the API call that creates a key with its limits.
func createKey(ctx context.Context, pool *pgxpool.Pool, key string, max int) error {
	_, err := pool.Exec(ctx, `INSERT INTO fleetlimit.keys (key, max_limit) VALUES ($1, $2)`, key, max)
	return err
}

// database is the primary, its streaming replica (whose replication goes
// through a proxy so it can be cut), and an admin pool connected straight
// to the primary. A failover makes the replica the primary.
type database struct {
	tox  *toxiproxy.ApiServer
	opts pgtemp.Options

	mu      sync.Mutex
	primary *pgtemp.Cluster
	replica *pgtemp.Cluster
	repl    *tcpProxy
	pool    *pgxpool.Pool
	old     []*pgtemp.Cluster // failed-over primaries, removed at close
	proxies []*tcpProxy       // every replication proxy, stopped at close
	n       int
}

func startDatabase(ctx context.Context, tox *toxiproxy.ApiServer, key string, max int) (*database, error) {
	d := &database{tox: tox, opts: pgtemp.Options{Settings: pgSettings}}
	primary, err := pgtemp.Start(ctx, d.opts)
	if err != nil {
		return nil, err
	}
	d.primary = primary
	if d.pool, err = pgxpool.New(ctx, primary.DSN("postgres")); err != nil {
		return d, err
	}
	if err := prepare(ctx, d.pool, key, max); err != nil {
		return d, err
	}
	return d, d.startReplica(ctx)
}

// prepare migrates a new database, creates the key and the table where
// database.evict records its commits.
func prepare(ctx context.Context, pool *pgxpool.Pool, key string, max int) error {
	if err := migrations.Up(ctx, pool); err != nil {
		return err
	}
	if err := createKey(ctx, pool, key, max); err != nil {
		return err
	}
	_, err := pool.Exec(ctx, `CREATE TABLE chaos_evictions (fault integer PRIMARY KEY, at timestamptz NOT NULL)`)
	return err
}

// evict evicts the node id on key for the numbered fault, retrying as exec
// does, and returns when the eviction committed by the database's clock:
// each attempt records the time in the eviction's own transaction, after
// the key's lock is taken, and the first attempt that commits keeps its
// record. exec's return can come long after the commit, when an attempt
// committed but its reply was lost. A record lost in a failover reads as
// now.
func (d *database) evict(ctx context.Context, key, id string, fault int) (time.Time, error) {
	err := d.retry(ctx, func(ctx context.Context, pool *pgxpool.Pool) error {
		return pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
			if _, err := tx.Exec(ctx, `SELECT fleetlimit.evict($1, $2)`, key, id); err != nil {
				return err
			}
			_, err := tx.Exec(ctx, `INSERT INTO chaos_evictions (fault, at) VALUES ($1, clock_timestamp())
			                         ON CONFLICT DO NOTHING`, fault)
			return err
		})
	})
	if err != nil {
		return time.Time{}, err
	}
	var at time.Time
	if err := d.queryRow(ctx, `SELECT at FROM chaos_evictions WHERE fault = $1`, []any{fault}, &at); err != nil {
		return time.Now(), nil
	}
	return at, nil
}

// startReplica starts a replica of the primary through a new replication
// proxy.
func (d *database) startReplica(ctx context.Context) error {
	d.mu.Lock()
	d.n++
	name, primary := fmt.Sprintf("replication-%d", d.n), d.primary
	d.mu.Unlock()
	repl, err := newTCPProxy(d.tox, name, primary.Addr())
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.proxies = append(d.proxies, repl)
	d.mu.Unlock()
	replica, err := pgtemp.StartReplica(ctx, repl.addr, d.opts)
	if err != nil {
		return err
	}
	d.mu.Lock()
	d.replica, d.repl = replica, repl
	d.mu.Unlock()
	return nil
}

// current returns the primary.
func (d *database) current() *pgtemp.Cluster {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.primary
}

// exec runs sql on the primary, retrying for up to 20s while it is down or
// failing over. Errors the database raised are returned at once.
func (d *database) exec(ctx context.Context, sql string, args ...any) error {
	return d.retry(ctx, func(ctx context.Context, pool *pgxpool.Pool) error {
		_, err := pool.Exec(ctx, sql, args...)
		return err
	})
}

// queryRow scans one row into dest, retrying as exec does; pgx.ErrNoRows is
// returned as is.
func (d *database) queryRow(ctx context.Context, sql string, args []any, dest ...any) error {
	return d.retry(ctx, func(ctx context.Context, pool *pgxpool.Pool) error {
		return pool.QueryRow(ctx, sql, args...).Scan(dest...)
	})
}

func (d *database) retry(ctx context.Context, fn func(context.Context, *pgxpool.Pool) error) error {
	deadline := time.Now().Add(20 * time.Second)
	for {
		d.mu.Lock()
		pool := d.pool
		d.mu.Unlock()
		attempt, cancel := context.WithTimeout(ctx, 2*time.Second)
		err := fn(attempt, pool)
		cancel()
		if err == nil || errors.Is(err, pgx.ErrNoRows) || isServerError(err) || time.Now().After(deadline) || ctx.Err() != nil {
			return err
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// isServerError reports whether the server raised err (as opposed to the
// connection failing), excluding the errors of a server shutting down or
// starting.
func isServerError(err error) bool {
	var pgErr interface{ SQLState() string }
	if !errors.As(err, &pgErr) {
		return false
	}
	switch code := pgErr.SQLState(); {
	case code == "57P01", code == "57P02", code == "57P03": // shutdown, crash, cannot connect now
		return false
	case len(code) == 5 && code[:2] == "08": // connection exceptions
		return false
	}
	return true
}

// restart restarts the primary as pg_ctl restart -m fast does (a fast
// shutdown, then a start on the same port).
func (d *database) restart(ctx context.Context) error {
	return d.current().Restart(ctx)
}

// down stops the primary immediately, waits for, then starts it again on the
// same port.
func (d *database) down(ctx context.Context, wait time.Duration) error {
	primary := d.current()
	if err := primary.StopServer(pgtemp.ShutdownImmediate); err != nil {
		return err
	}
	time.Sleep(wait)
	return primary.StartServer(ctx)
}

// failover cuts replication, lets the primary take writes the replica
// misses for lag, kills the primary (kill -9), promotes the replica and
// points every node proxy at it. The replica is the primary from then on.
func (d *database) failover(ctx context.Context, lag time.Duration, nodeProxies []*tcpProxy) error {
	d.mu.Lock()
	primary, replica, repl := d.primary, d.replica, d.repl
	d.mu.Unlock()
	if replica == nil {
		return errors.New("failover: no replica")
	}
	repl.stop()
	time.Sleep(lag)
	if err := primary.StopServer(pgtemp.ShutdownKill); err != nil {
		return err
	}
	if err := replica.Promote(ctx); err != nil {
		return err
	}
	var errs []error
	for _, x := range nodeProxies {
		errs = append(errs, x.repoint(replica.Addr()))
	}
	pool, err := pgxpool.New(ctx, replica.DSN("postgres"))
	if err != nil {
		return errors.Join(append(errs, err)...)
	}
	d.mu.Lock()
	oldPool := d.pool
	d.primary, d.replica, d.repl, d.pool = replica, nil, nil, pool
	d.old = append(d.old, primary)
	d.mu.Unlock()
	oldPool.Close()
	return errors.Join(errs...)
}

// close stops every cluster and proxy.
func (d *database) close() error {
	d.mu.Lock()
	defer d.mu.Unlock()
	if d.pool != nil {
		d.pool.Close()
	}
	var errs []error
	for _, c := range append(append(d.old, d.primary), d.replica) {
		if c != nil {
			errs = append(errs, c.Stop())
		}
	}
	for _, x := range d.proxies {
		x.stop()
	}
	return errors.Join(errs...)
}
