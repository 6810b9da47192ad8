package cli

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	ucli "github.com/urfave/cli/v2"

	"github.com/fleetlimit/fleetlimit/internal/pgtemp"
	"github.com/fleetlimit/fleetlimit/migrations"
)

// The demo's defaults.
const (
	DefaultDemoDuration = 40 * time.Second
	DefaultDemoNodes    = 4
	DefaultDemoWorkers  = 32
)

// Bounds of the demo's flags, so that a typo cannot start a runaway fleet.
const (
	minDemoDuration = time.Second
	maxDemoDuration = 10 * time.Minute
	maxDemoNodes    = 32
	maxDemoWorkers  = 256
)

// pgtempStartTimeout bounds starting the throwaway cluster.
const pgtempStartTimeout = 60 * time.Second

func (r *runner) demoCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "demo",
		Usage: "run a fleet of nodes against a simulated provider whose capacity moves, and summarize",
		Description: `demo runs --nodes fleet nodes in this process, each with --workers goroutines
sending requests as fast as their node admits them to a simulated provider
on 127.0.0.1. The provider's capacity is hidden from the nodes and moves
(40 → 20 at a third of --duration → 60 at two thirds); above it, requests
get 429. With the default flags demand (nodes × workers, 128) is far above
capacity, so the fleet has to find the capacity and share it; with fewer
workers in all than the capacity, the summary says the demand bounded the
goodput. While it runs, demo shows the same view
as watch (with the provider's capacity); at the end it prints a summary:
goodput, 429s, the provider's maximum concurrency against its capacity,
the time spent over capacity, and each node's share and successes.

Database: only a database named on the command line (--database-url) is
used: demo migrates it and uses a key of its own (fleetctl-demo-...),
which it deletes at the end; nothing else is touched. $FLEET_DATABASE_URL
and $DATABASE_URL are not used by the demo, and libpq's PG* variables do not
choose its database: without --database-url it starts a throwaway Postgres
cluster on 127.0.0.1 (initdb/postgres must be installed) and removes it at
the end. The PG* variables still fill in what a connection string leaves
out (PGPASSWORD, PGOPTIONS, ...), the throwaway cluster's included. The first
line demo prints (on stderr) names the database. Ctrl-C ends the run early:
the fleet stops, the summary of the run so far is printed, everything is
cleaned up, and demo exits 0, as watch does. Before the run starts (while
Postgres or the nodes start) there is no summary: Ctrl-C cleans up and
demo exits 1, saying it was interrupted.`,
		Flags: []ucli.Flag{
			&ucli.DurationFlag{Name: "duration", Value: DefaultDemoDuration, Usage: fmt.Sprintf("how long the fleet runs, %s..%s", writtenDuration(minDemoDuration), writtenDuration(maxDemoDuration))},
			decimalFlagDefault("nodes", fmt.Sprintf("how many fleet nodes, 1..%d", maxDemoNodes), DefaultDemoNodes, fmt.Sprintf("1..%d", maxDemoNodes)),
			decimalFlagDefault("workers", fmt.Sprintf("request goroutines per node, 1..%d", maxDemoWorkers), DefaultDemoWorkers, fmt.Sprintf("1..%d", maxDemoWorkers)),
			&ucli.DurationFlag{Name: "interval", Usage: "time between view refreshes", DefaultText: "500ms on a terminal, else 1s"},
		},
		Action: r.action(func(c *ucli.Context) error {
			if _, err := wantArgs(c); err != nil {
				return err
			}
			cfg := demoConfig{
				duration: c.Duration("duration"),
				nodes:    int(decimalValue(c, "nodes")),
				workers:  int(decimalValue(c, "workers")),
				interval: c.Duration("interval"),
			}
			live := r.env.IsTerminal(r.env.Stdout)
			if !c.IsSet("interval") {
				cfg.interval = time.Second
				if live {
					cfg.interval = 500 * time.Millisecond
				}
			}
			if err := cfg.validate(); err != nil {
				return err
			}
			return r.demo(c, cfg)
		}),
	}
}

// demoConfig is what the demo's flags say.
type demoConfig struct {
	duration         time.Duration
	nodes, workers   int
	interval         time.Duration
	databaseLabel    string // where the database came from, for the summary
	externalDatabase bool
}

func (d demoConfig) validate() error {
	switch {
	case d.duration < minDemoDuration || d.duration > maxDemoDuration:
		return usageErrorf("invalid value %s for --duration: want %s..%s",
			writtenDuration(d.duration), writtenDuration(minDemoDuration), writtenDuration(maxDemoDuration))
	case d.nodes < 1 || d.nodes > maxDemoNodes:
		return usageErrorf("invalid value %d for --nodes: want 1..%d", d.nodes, maxDemoNodes)
	case d.workers < 1 || d.workers > maxDemoWorkers:
		return usageErrorf("invalid value %d for --workers: want 1..%d", d.workers, maxDemoWorkers)
	case d.interval < minInterval:
		return usageErrorf("invalid value %s for --interval: want >= %s", writtenDuration(d.interval), writtenDuration(minInterval))
	}
	return nil
}

// demo gets a database (the configured one, else a throwaway cluster),
// migrates it, runs the fleet and cleans up.
func (r *runner) demo(c *ucli.Context, cfg demoConfig) (err error) {
	ctx := c.Context
	// A reader that goes away (fleetctl demo | head) makes the next write
	// fail with EPIPE, rather than SIGPIPE killing the process before it
	// stops its nodes and its throwaway cluster. It stays so until the
	// process exits: the error is written last, maybe to the same pipe.
	signal.Notify(make(chan os.Signal, 1), syscall.SIGPIPE)
	s, err := r.connSettingsFrom(c)
	if err != nil {
		return err
	}
	if !c.IsSet(flagDatabaseURL) {
		// Only a database named on the command line is the demo's to use.
		s.url, s.source = "", ""
		r.progress("demo database: a throwaway Postgres cluster on 127.0.0.1, removed at the end " +
			"(give --database-url to use another; $DATABASE_URL is not used)")
		startCtx, cancel := context.WithTimeout(ctx, pgtempStartTimeout)
		cluster, err := pgtemp.Start(startCtx, pgtemp.Options{})
		cancel()
		if err != nil {
			if errors.Is(err, pgtemp.ErrNotInstalled) {
				return fmt.Errorf("no --database-url given and no Postgres to start a throwaway one: %w", err)
			}
			return fmt.Errorf("start a throwaway Postgres: %w", err)
		}
		defer func() { err = errors.Join(err, cluster.Stop()) }()
		s.url, s.source = cluster.DSN("postgres"), "throwaway cluster"
		cfg.databaseLabel = fmt.Sprintf("throwaway cluster on 127.0.0.1:%d", cluster.Port())
	} else {
		cfg.externalDatabase = true
	}
	poolCfg, timeout, err := poolConfig(s)
	if err != nil {
		return err
	}
	r.timeout = timeout
	if cfg.externalDatabase {
		cfg.databaseLabel = fmt.Sprintf("database %q on %s (from %s)", poolCfg.ConnConfig.Database,
			endpoint(poolCfg.ConnConfig.Host, poolCfg.ConnConfig.Port), s.source)
		r.progress("demo database: %s; the demo migrates it, and deletes its own key at the end", cfg.databaseLabel)
	}
	poolCfg.MaxConns = int32(cfg.nodes + 4)
	pool, err := connect(ctx, poolCfg)
	if err != nil {
		return err
	}
	defer pool.Close()
	if err := migrations.Up(ctx, pool); err != nil {
		return migrationHint(err)
	}
	key, err := demoKey()
	if err != nil {
		return err
	}
	if cfg.externalDatabase {
		defer func() { err = errors.Join(err, deleteDemoKey(context.WithoutCancel(ctx), pool, key)) }()
	}
	sum, err := r.runDemo(ctx, pool, key, cfg)
	if sum.key != "" { // the run ended; stopping the fleet may still have failed
		sum.write(r.env.Stdout)
	}
	return err
}

// progress prints a status line on stderr.
func (r *runner) progress(format string, args ...any) {
	fmt.Fprintf(r.env.Stderr, format+"\n", args...)
}

// demoKey returns a key no other run uses: fleetctl-demo-<time>-<random>.
func demoKey() (string, error) {
	b := make([]byte, 3)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return fmt.Sprintf("fleetctl-demo-%s-%s", time.Now().UTC().Format("20060102-150405"), hex.EncodeToString(b)), nil
}

// sqlDeleteDemoKey removes the demo's key row; its node rows go with it
// (ON DELETE CASCADE). By then every node has left.
const sqlDeleteDemoKey = `DELETE FROM fleetlimit.keys WHERE key = $1`

// deleteDemoKey deletes key, trying again for demoDeleteFor while the
// database fails it for a reason that may pass (a restart, say).
func deleteDemoKey(ctx context.Context, pool *pgxpool.Pool, key string) error {
	ctx, cancel := context.WithTimeout(ctx, demoDeleteFor)
	defer cancel()
	for {
		_, err := pool.Exec(ctx, sqlDeleteDemoKey, key)
		if err == nil {
			return nil
		}
		if !passing(err) || ctx.Err() != nil {
			if left, lerr := demoKeyExists(ctx, pool, key); lerr == nil && !left {
				return nil // never made: the nodes' first heartbeat failed
			}
			return fmt.Errorf("the demo's key %q is left in the database (%s removes it): %w",
				key, shellCommand("keys delete --force", key), err)
		}
		select {
		case <-ctx.Done():
		case <-time.After(demoDeleteRetry):
		}
	}
}

// demoKeyExists reports whether key has a row: a role without the rights
// to delete it (an operator's) may read it.
func demoKeyExists(ctx context.Context, pool *pgxpool.Pool, key string) (bool, error) {
	var exists bool
	err := pool.QueryRow(ctx, sqlDemoKeyExists, key).Scan(&exists)
	return exists, err
}

// sqlDemoKeyExists reads whether the demo's key has a row.
const sqlDemoKeyExists = `SELECT EXISTS (SELECT 1 FROM fleetlimit.keys WHERE key = $1)`

// demoDeleteFor bounds deleteDemoKey's tries, demoDeleteRetry apart.
const (
	demoDeleteFor   = 30 * time.Second
	demoDeleteRetry = 500 * time.Millisecond
)
