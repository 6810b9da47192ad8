// Package migrations holds fleetlimit's schema as goose SQL migrations,
// embedded in the binary, and runs them with goose's Provider API.
//
// Everything fleetlimit owns lives in the schema "fleetlimit". Applied
// versions are recorded in the table public.fleetlimit_schema_version, so an
// application's own goose version table is never touched. Runs take a
// Postgres session advisory lock (ID [LockID]) so that many processes may call
// [Up] at boot: one migrates, the others wait and then find nothing to do.
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
// everything fleetlimit created.
func DownTo(ctx context.Context, pool *pgxpool.Pool, version int64) error {
	return withProvider(pool, func(p *goose.Provider) error {
		_, err := p.DownTo(ctx, version)
		return err
	})
}

// Status reports every known migration and whether it is applied.
func Status(ctx context.Context, pool *pgxpool.Pool) ([]*goose.MigrationStatus, error) {
	var out []*goose.MigrationStatus
	err := withProvider(pool, func(p *goose.Provider) error {
		var err error
		out, err = p.Status(ctx)
		return err
	})
	return out, err
}

// HasPending reports whether some embedded migration is not applied yet.
func HasPending(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var pending bool
	err := withProvider(pool, func(p *goose.Provider) error {
		var err error
		pending, err = p.HasPending(ctx)
		return err
	})
	return pending, err
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
