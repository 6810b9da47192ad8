// Package migrations holds fleetlimit's schema as goose SQL migrations,
// embedded in the binary, and runs them with goose's Provider API.
//
// Everything fleetlimit owns lives in the schema "fleetlimit". Applied
// versions are recorded in the table public.fleetlimit_schema_version, so an
// application's own goose version table is never touched. Runs take a
// Postgres session advisory lock (ID [LockID]) so that many processes may call
// [Up] at boot: one migrates, the others wait and then find nothing to do.
// [Reset] removes the version table too; [Status] and [HasPending] read
// without creating it.
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

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// VersionTable is the table that records which migrations have been applied.
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
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(LockID))
	if err != nil {
		return nil, fmt.Errorf("migrations: session locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, FS(),
		goose.WithTableName(VersionTable),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

// Up applies every pending migration to the database behind pool. It is safe
// to call from many processes at once.
func Up(ctx context.Context, pool *pgxpool.Pool) error {
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

// Reset rolls every migration back and then drops [VersionTable], so that
// nothing fleetlimit created is left. The table is dropped under the lock
// that migrations take, and only while it records no applied migration: an
// [Up] that ran meanwhile keeps it.
func Reset(ctx context.Context, pool *pgxpool.Pool) (err error) {
	if err := DownTo(ctx, pool, 0); err != nil {
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
	var applied int64
	if err := conn.QueryRow(ctx, sqlAppliedVersions).Scan(&applied); err != nil {
		return fmt.Errorf("migrations: count applied versions: %w", err)
	}
	if applied > 0 {
		return nil
	}
	if _, err := conn.Exec(ctx, sqlDropVersionTable); err != nil {
		return fmt.Errorf("migrations: drop %s: %w", VersionTable, err)
	}
	return nil
}

// The SQL of Reset and of the version-table check. The table name is
// unqualified, as goose creates it: the first schema on the search path.
const (
	sqlLock             = `SELECT pg_advisory_lock($1)`
	sqlUnlock           = `SELECT pg_advisory_unlock($1)`
	sqlAppliedVersions  = `SELECT count(*) FROM ` + VersionTable + ` WHERE version_id > 0`
	sqlDropVersionTable = `DROP TABLE ` + VersionTable
	sqlVersionTable     = `SELECT to_regclass('` + VersionTable + `') IS NOT NULL`
)

// Status reports every known migration and whether it is applied. It
// creates nothing: without [VersionTable] every migration is pending.
func Status(ctx context.Context, pool *pgxpool.Pool) ([]*goose.MigrationStatus, error) {
	var out []*goose.MigrationStatus
	err := withProvider(pool, func(p *goose.Provider) error {
		exists, err := versionTableExists(ctx, pool)
		if err != nil {
			return err
		}
		if !exists {
			for _, src := range p.ListSources() {
				out = append(out, &goose.MigrationStatus{Source: src, State: goose.StatePending})
			}
			return nil
		}
		out, err = p.Status(ctx)
		return err
	})
	return out, err
}

// HasPending reports whether some embedded migration is not applied yet.
// Like [Status], it creates nothing.
func HasPending(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var pending bool
	err := withProvider(pool, func(p *goose.Provider) error {
		exists, err := versionTableExists(ctx, pool)
		if err != nil {
			return err
		}
		if !exists {
			pending = len(p.ListSources()) > 0
			return nil
		}
		pending, err = p.HasPending(ctx)
		return err
	})
	return pending, err
}

// versionTableExists reports whether [VersionTable] exists. goose creates
// it on any call, reads included.
func versionTableExists(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var exists bool
	if err := pool.QueryRow(ctx, sqlVersionTable).Scan(&exists); err != nil {
		return false, fmt.Errorf("look for %s: %w", VersionTable, err)
	}
	return exists, nil
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
