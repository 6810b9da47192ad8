// Package migrations holds fleetlimit's schema as goose SQL migrations,
// embedded in the binary, and runs them with goose's Provider API.
//
// Everything fleetlimit owns lives in the schema "fleetlimit". Applied
// versions are recorded in the table fleetlimit_schema_version (in public,
// or in the first schema of the migrating role's search path), so an
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

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// VersionTable is the table that records which migrations have been
// applied: in the schema public, or in the first schema of the migrating
// role's search path (see [Up]).
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
// using [VersionTable] in the first schema of the search path, as goose
// places it, and a session locker on [LockID]. The package's own functions
// find an existing table wherever it is (see [Up]). The caller closes the
// provider; closing it does not close db.
func NewProvider(db *sql.DB) (*goose.Provider, error) {
	return newProvider(db, VersionTable)
}

func newProvider(db *sql.DB, table string) (*goose.Provider, error) {
	// A process that finds the lock taken tries again every second (goose's
	// default is every 5 s), for up to 5 minutes.
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockID(LockID), lock.WithLockTimeout(1, 300))
	if err != nil {
		return nil, fmt.Errorf("migrations: session locker: %w", err)
	}
	p, err := goose.NewProvider(goose.DialectPostgres, db, FS(),
		goose.WithTableName(table),
		goose.WithSessionLocker(locker),
		goose.WithDisableGlobalRegistry(true),
	)
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return p, nil
}

// Up applies every pending migration to the database behind pool. It is safe
// to call from many processes at once, and with a [Reset] under way. It
// returns [ErrSchemaGone] when the version table records migrations whose
// schema was dropped by hand.
//
// The version table is found wherever an earlier run created it: of the
// tables named [VersionTable], the first on the search path that records
// an applied migration (the role that migrated may have had a schema of
// its own first on its path, as Postgres 15 suggests), else the first
// found; without one, goose creates it in the first schema of the search
// path.
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	err := up(ctx, pool)
	if isUndefinedTable(err) {
		// A Reset dropped the table between goose's check for it and its
		// use: look again.
		err = up(ctx, pool)
	}
	return err
}

func up(ctx context.Context, pool *pgxpool.Pool) error {
	if _, err := Status(ctx, pool); err != nil {
		return err
	}
	return withProvider(ctx, pool, func(p *goose.Provider) error {
		_, err := p.Up(ctx)
		return err
	})
}

// DownTo rolls migrations back until version is the newest applied; 0 removes
// the fleetlimit schema but keeps [VersionTable] (see [Reset]).
func DownTo(ctx context.Context, pool *pgxpool.Pool, version int64) error {
	return withProvider(ctx, pool, func(p *goose.Provider) error {
		_, err := p.DownTo(ctx, version)
		return err
	})
}

// ErrSchemaGone reports a version table that records applied migrations
// while the fleetlimit schema they created is gone (dropped by hand):
// nothing can be rolled back or applied until [Reset] clears the table.
var ErrSchemaGone = errors.New("migrations: " + VersionTable + " records applied migrations, " +
	"but the fleetlimit schema is gone (dropped by hand?)")

// Reset rolls every migration back and then drops [VersionTable], so that
// nothing fleetlimit created is left; after [ErrSchemaGone] it only drops
// the table. The table is dropped under the lock that migrations take, and
// only while it records no applied migration whose schema still exists:
// an [Up] that ran meanwhile keeps it. A table another Reset dropped
// meanwhile is not looked for again.
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
	table, found, err := locate(ctx, conn)
	if err != nil || !found {
		return err // another Reset dropped it
	}
	var live bool
	if err := conn.QueryRow(ctx, fmt.Sprintf(sqlLiveVersions, table.quoted())).Scan(&live); err != nil {
		if isUndefinedTable(err) {
			return nil
		}
		return fmt.Errorf("migrations: read %s: %w", table.quoted(), err)
	}
	if live {
		return nil
	}
	if _, err := conn.Exec(ctx, fmt.Sprintf(sqlDropVersionTable, table.quoted())); err != nil {
		return fmt.Errorf("migrations: drop %s: %w", table.quoted(), err)
	}
	return nil
}

// HasVersionTable reports whether a [VersionTable] exists (see [Up] for
// where it is looked for).
func HasVersionTable(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	_, found, err := locate(ctx, pool)
	return found, err
}

// querier is what locate needs of a pool or a connection.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// versionTable is a VersionTable found or to be created in schema ("":
// where the search path puts it).
type versionTable struct{ schema string }

// quoted is the table's name for this package's SQL.
func (t versionTable) quoted() string {
	if t.schema == "" {
		return pgx.Identifier{VersionTable}.Sanitize()
	}
	return pgx.Identifier{t.schema, VersionTable}.Sanitize()
}

// goose is the table's name for goose, which splits it at the first dot
// and quotes nothing.
func (t versionTable) goose() string {
	if t.schema == "" {
		return VersionTable
	}
	return t.schema + "." + VersionTable
}

// locate returns the version table (see [Up]): of the tables named
// VersionTable, in search-path order then by schema name, the first that
// records an applied migration, else the first one. found is false when
// there is none; the table is then where goose would create it.
func locate(ctx context.Context, q querier) (t versionTable, found bool, err error) {
	rows, err := q.Query(ctx, sqlVersionTables, VersionTable)
	if err != nil {
		return t, false, fmt.Errorf("migrations: look for %s: %w", VersionTable, err)
	}
	schemas, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return t, false, fmt.Errorf("migrations: look for %s: %w", VersionTable, err)
	}
	for _, schema := range schemas {
		t := versionTable{schema}
		var applied bool
		if err := q.QueryRow(ctx, fmt.Sprintf(sqlRecordsVersions, t.quoted())).Scan(&applied); err == nil && applied {
			return t, true, nil
		}
		// Unreadable (another role's) or empty: a later one may be it.
	}
	if len(schemas) > 0 {
		return versionTable{schemas[0]}, true, nil
	}
	var schema *string
	if err := q.QueryRow(ctx, `SELECT current_schema()`).Scan(&schema); err != nil {
		return t, false, fmt.Errorf("migrations: current schema: %w", err)
	}
	if schema != nil {
		t.schema = *schema
	}
	return t, false, nil
}

// The SQL this package runs besides goose's; %s is the version table,
// schema-qualified and quoted.
const (
	sqlLock   = `SELECT pg_advisory_lock($1)`
	sqlUnlock = `SELECT pg_advisory_unlock($1)`
	// sqlVersionTables lists the schemas holding a table named $1, those
	// on the search path first, in its order.
	sqlVersionTables = `SELECT n.nspname::text
	  FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
	 WHERE c.relname = $1 AND c.relkind IN ('r', 'p')
	 ORDER BY array_position(current_schemas(false), n.nspname) NULLS LAST, n.nspname`
	sqlRecordsVersions = `SELECT EXISTS (SELECT 1 FROM %s WHERE version_id > 0)`
	// sqlApplied lists the applied versions as goose records them (a row
	// per applied version: goose deletes a version's row when it rolls it
	// back; version 0 is the table's own), when each was applied (goose
	// writes the session's local time), and, in the same snapshot,
	// whether the fleetlimit schema exists.
	sqlApplied = `SELECT version_id, max(tstamp) AT TIME ZONE current_setting('TimeZone'),
	       to_regnamespace('fleetlimit') IS NOT NULL
	  FROM %s WHERE version_id > 0 GROUP BY version_id`
	// sqlLiveVersions: some applied version's schema still exists.
	sqlLiveVersions = `SELECT EXISTS (SELECT 1 FROM %s WHERE version_id > 0)
	    AND to_regnamespace('fleetlimit') IS NOT NULL`
	sqlDropVersionTable = `DROP TABLE IF EXISTS %s`
)

// Status reports every embedded migration and whether it is applied. It
// reads [VersionTable] (see [Up] for where) and creates nothing (goose
// would create the table on any call): without the table every migration
// is pending. It returns [ErrSchemaGone] when the table records applied
// migrations but the fleetlimit schema is gone.
func Status(ctx context.Context, pool *pgxpool.Pool) ([]*goose.MigrationStatus, error) {
	sources, err := sourceList()
	if err != nil {
		return nil, err
	}
	table, found, err := locate(ctx, pool)
	if err != nil {
		return nil, err
	}
	applied := map[int64]time.Time{}
	if found {
		var gone bool
		applied, gone, err = readApplied(ctx, pool, table)
		if err == nil && gone {
			// A rollback of the first migration that commits between the
			// statement's snapshot and its look at the catalog reads
			// the same: only a second look tells them apart.
			applied, gone, err = readApplied(ctx, pool, table)
		}
		if err != nil {
			return nil, err
		}
		if gone {
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

// readApplied reads the applied versions recorded in table, and whether
// the fleetlimit schema is gone although some are. A table dropped
// meanwhile records none.
func readApplied(ctx context.Context, pool *pgxpool.Pool, table versionTable) (map[int64]time.Time, bool, error) {
	applied := map[int64]time.Time{}
	gone := false
	rows, err := pool.Query(ctx, fmt.Sprintf(sqlApplied, table.quoted()))
	if err == nil {
		for rows.Next() {
			var (
				v      int64
				at     time.Time
				schema bool
			)
			if err := rows.Scan(&v, &at, &schema); err != nil {
				rows.Close()
				return nil, false, fmt.Errorf("migrations: read %s: %w", table.quoted(), err)
			}
			applied[v], gone = at, !schema
		}
		err = rows.Err()
	}
	if err != nil && !isUndefinedTable(err) {
		return nil, false, fmt.Errorf("migrations: read %s: %w", table.quoted(), err)
	}
	return applied, gone, nil
}

// sourceList lists the embedded migrations, as goose's ListSources does,
// in version order.
func sourceList() ([]*goose.Source, error) {
	names, err := fs.Glob(FS(), "*.sql")
	if err != nil {
		return nil, fmt.Errorf("migrations: %w", err)
	}
	out := make([]*goose.Source, 0, len(names))
	for _, name := range names {
		v, err := goose.NumericComponent(name)
		if err != nil {
			return nil, fmt.Errorf("migrations: %s: %w", name, err)
		}
		out = append(out, &goose.Source{Type: goose.TypeSQL, Path: name, Version: v})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Version < out[j].Version })
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

// withProvider runs fn with a provider on the version table that locate
// finds.
func withProvider(ctx context.Context, pool *pgxpool.Pool, fn func(*goose.Provider) error) (err error) {
	table, _, err := locate(ctx, pool)
	if err != nil {
		return err
	}
	db := stdlib.OpenDBFromPool(pool)
	defer func() { err = errors.Join(err, db.Close()) }()
	p, err := newProvider(db, table.goose())
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, p.Close()) }()
	if err := fn(p); err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	return nil
}
