// Package migrations holds fleetlimit's schema as goose SQL migrations,
// embedded in the binary, and runs them with goose's Provider API.
//
// Everything fleetlimit owns lives in the schema "fleetlimit". Applied
// versions are recorded in the table public.fleetlimit_schema_version, so an
// application's own goose version table is never touched. Runs take a
// Postgres session advisory lock (ID [LockID]) so that many processes may call
// [Up] at boot: one migrates, the others wait and then find nothing to do.
// [Reset] removes the version table too; [Status] and [HasPending] read
// it without creating it.
package migrations

import (
	"context"
	"crypto/sha256"
	"database/sql"
	"embed"
	"encoding/hex"
	"errors"
	"fmt"
	"io/fs"
	"sort"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// VersionTable is the table, in the schema public, that records which
// migrations have been applied.
const VersionTable = "fleetlimit_schema_version"

// LockID is the Postgres advisory lock key held while migrating.
const LockID int64 = 0x666c6565746c696d // "fleetlim"

//go:embed sql/*.sql
var embedded embed.FS

// FS returns the embedded migration files (names like 00001_schema.sql).
func FS() fs.FS {
	sub, err := fs.Sub(embedded, "sql")
	if err != nil {
		panic(err) // the embed pattern guarantees the directory exists
	}
	return sub
}

// Hash returns a hex SHA-256 over the names and contents of the embedded
// migrations. Two binaries with the same Hash build the same schema, so it
// can key a cache of migrated template databases.
func Hash() string {
	fsys := FS()
	names, err := fs.Glob(fsys, "*.sql")
	if err != nil {
		panic(err)
	}
	sort.Strings(names)
	h := sha256.New()
	for _, name := range names {
		b, err := fs.ReadFile(fsys, name)
		if err != nil {
			panic(err)
		}
		fmt.Fprintf(h, "%s\x00%d\x00", name, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil))
}

// NewProvider returns a goose provider over db for the embedded migrations,
// using [VersionTable] and a session locker on [LockID]. The caller closes
// the provider; closing it does not close db.
func NewProvider(db *sql.DB) (*goose.Provider, error) {
	// A process that finds the lock taken tries again every second (goose's
	// default is every 5 s), for up to 5 minutes.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(LockID), lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, fmt.Errorf("migrations: session locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, FS(),
		goose.WithTableName(qualifiedVersionTable),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

// Up applies every pending migration to the database behind pool. It is safe
// to call from many processes at once. It returns [ErrSchemaGone] when the
// version table records migrations whose schema was dropped by hand.
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := Status(ctx, pool); err != nil {
		return err
	}
	return withProvider(pool, func(p *goose.Provider) error {
		_, err := p.Up(ctx)
		return err
	})
}

// DownTo rolls migrations back until version is the newest applied; 0 removes
// the fleetlimit schema but keeps [VersionTable] (see [Reset]).
func DownTo(ctx context.Context, pool *pgxpool.Pool, version int64) error {
	return withProvider(pool, func(p *goose.Provider) error {
		_, err := p.DownTo(ctx, version)
		return err
	})
}

// ErrSchemaGone reports a version table that records applied migrations
// while the fleetlimit schema they created is gone (dropped by hand):
// nothing can be rolled back or applied until [Reset] clears the table.
var ErrSchemaGone = errors.New("migrations: " + qualifiedVersionTable + " records applied migrations, " +
	"but the fleetlimit schema is gone (dropped by hand?)")

// Reset rolls every migration back and then drops [VersionTable], so that
// nothing fleetlimit created is left; after [ErrSchemaGone] it only drops
// the table. The table is dropped under the lock that migrations take, and
// only while it records no applied migration whose schema still exists:
// an [Up] that ran meanwhile keeps it. Without the table Reset does
// nothing.
func Reset(ctx context.Context, pool *pgxpool.Pool) (err error) {
	if _, err := Status(ctx, pool); err == nil {
		if err := DownTo(ctx, pool, 0); err != nil {
			return err
		}
	} else if !errors.Is(err, ErrSchemaGone) {
		return err
	}
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, sqlLock, LockID); err != nil {
		return fmt.Errorf("migrations: lock: %w", err)
	}
	defer func() {
		if _, uerr := conn.Exec(context.WithoutCancel(ctx), sqlUnlock, LockID); uerr != nil {
			err = errors.Join(err, fmt.Errorf("migrations: unlock: %w", uerr))
			conn.Conn().Close(context.WithoutCancel(ctx)) // a session that may hold the lock is not reused
		}
	}()
	var live bool
	if err := conn.QueryRow(ctx, sqlLiveVersions).Scan(&live); err != nil {
		if isUndefinedTable(err) {
			return nil // another Reset dropped it
		}
		return fmt.Errorf("migrations: read %s: %w", qualifiedVersionTable, err)
	}
	if live {
		return nil
	}
	if _, err := conn.Exec(ctx, sqlDropVersionTable); err != nil {
		return fmt.Errorf("migrations: drop %s: %w", qualifiedVersionTable, err)
	}
	return nil
}

// HasVersionTable reports whether [VersionTable] exists.
func HasVersionTable(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var exists bool
	if err := pool.QueryRow(ctx, sqlHasVersionTable).Scan(&exists); err != nil {
		return false, fmt.Errorf("migrations: look for %s: %w", qualifiedVersionTable, err)
	}
	return exists, nil
}

// qualifiedVersionTable is [VersionTable] in the schema goose is told to
// keep it in, whatever the connecting role's search path.
const qualifiedVersionTable = "public." + VersionTable

// The SQL this package runs besides goose's.
const (
	sqlLock   = `SELECT pg_advisory_lock($1)`
	sqlUnlock = `SELECT pg_advisory_unlock($1)`
	// sqlApplied lists the applied versions as goose records them: a row
	// per applied version (goose deletes a version's row when it rolls
	// it back), version 0 being the table's own.
	sqlApplied = `SELECT version_id, max(tstamp) FROM ` + qualifiedVersionTable +
		` WHERE version_id > 0 GROUP BY version_id`
	sqlHasSchema = `SELECT to_regnamespace('fleetlimit') IS NOT NULL`
	// sqlLiveVersions: some applied version's schema still exists.
	sqlLiveVersions = `SELECT EXISTS (SELECT 1 FROM ` + qualifiedVersionTable + ` WHERE version_id > 0)
	    AND to_regnamespace('fleetlimit') IS NOT NULL`
	sqlDropVersionTable = `DROP TABLE IF EXISTS ` + qualifiedVersionTable
	sqlHasVersionTable  = `SELECT to_regclass('` + qualifiedVersionTable + `') IS NOT NULL`
)

// Status reports every embedded migration and whether it is applied. It
// reads [VersionTable] and creates nothing (goose would create the table on
// any call): without the table every migration is pending. It returns
// [ErrSchemaGone] when the table records applied migrations but the
// fleetlimit schema is gone.
func Status(ctx context.Context, pool *pgxpool.Pool) ([]*goose.MigrationStatus, error) {
	var sources []*goose.Source
	if err := withProvider(pool, func(p *goose.Provider) error {
		sources = p.ListSources()
		return nil
	}); err != nil {
		return nil, err
	}
	applied := map[int64]time.Time{}
	rows, err := pool.Query(ctx, sqlApplied)
	if err == nil {
		for rows.Next() {
			var (
				v  int64
				at time.Time
			)
			if err := rows.Scan(&v, &at); err != nil {
				rows.Close()
				return nil, fmt.Errorf("migrations: read %s: %w", qualifiedVersionTable, err)
			}
			applied[v] = at
		}
		err = rows.Err()
	}
	if err != nil && !isUndefinedTable(err) {
		return nil, fmt.Errorf("migrations: read %s: %w", qualifiedVersionTable, err)
	}
	if len(applied) > 0 {
		var schema bool
		if err := pool.QueryRow(ctx, sqlHasSchema).Scan(&schema); err != nil {
			return nil, fmt.Errorf("migrations: look for the fleetlimit schema: %w", err)
		}
		if !schema {
			return nil, ErrSchemaGone
		}
	}
	out := make([]*goose.MigrationStatus, len(sources))
	for i, src := range sources {
		out[i] = &goose.MigrationStatus{Source: src, State: goose.StatePending}
		if at, ok := applied[src.Version]; ok {
			out[i].State, out[i].AppliedAt = goose.StateApplied, at
		}
	}
	return out, nil
}

// HasPending reports whether some embedded migration is not applied yet.
// Like [Status], it creates nothing.
func HasPending(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	st, err := Status(ctx, pool)
	if err != nil {
		return false, err
	}
	for _, s := range st {
		if s.State != goose.StateApplied {
			return true, nil
		}
	}
	return false, nil
}

// isUndefinedTable reports a query on a table that does not exist.
func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

func withProvider(pool *pgxpool.Pool, fn func(*goose.Provider) error) (err error) {
	db := stdlib.OpenDBFromPool(pool)
	defer func() { err = errors.Join(err, db.Close()) }()
	p, err := NewProvider(db)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, p.Close()) }()
	if err := fn(p); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return nil
}
