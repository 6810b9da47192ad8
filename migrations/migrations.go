// Package migrations holds fleetlimit's schema as goose SQL migrations,
// embedded in the binary, and runs them with goose's Provider API.
//
// Everything fleetlimit owns lives in the schema "fleetlimit". Applied
// versions are recorded in the table fleetlimit_schema_version (in the first
// schema of the migrating role's search path, public by default), so an
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
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

// VersionTable is the table that records which migrations have been
// applied, in the first schema of the migrating role's search path (public
// by default), as goose places it.
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
// to call from many processes at once, and with a [Reset] under way. It
// returns what [Status] returns when the version table and the schema
// disagree, [ErrNoSchemaOnPath] when the search path has no schema for the
// version table, and does nothing when nothing is pending.
func Up(ctx context.Context, pool *pgxpool.Pool) error {
	_, _, err := UpVersions(ctx, pool)
	return err
}

// UpVersions is [Up], and reports the newest applied version before and
// after its run. Both are what the run found and left under the lock that
// migrations take: a run that waited for the lock while another applied
// every migration reports before == after, as one with nothing pending
// does.
func UpVersions(ctx context.Context, pool *pgxpool.Pool) (before, after int64, err error) {
	before, after, err = up(ctx, pool)
	if isUndefinedTable(err) {
		// The table was dropped by hand, without the lock, between
		// goose's check for it and its use: look again.
		before, after, err = up(ctx, pool)
	}
	return before, after, err
}

func up(ctx context.Context, pool *pgxpool.Pool) (before, after int64, err error) {
	st, err := Status(ctx, pool)
	if err != nil {
		return 0, 0, err
	}
	current, pending := newestApplied(st)
	if pending == 0 {
		return current, current, nil
	}
	var applied []*goose.MigrationResult
	err = withProvider(ctx, pool, func(p *goose.Provider) error {
		var err error
		applied, err = p.Up(ctx)
		return err
	})
	if err != nil {
		if _, serr := Status(ctx, pool); errors.Is(serr, ErrSchemaUnrecorded) {
			// Another run, whose search path put the table elsewhere,
			// migrated between this one's look at what is pending and
			// goose's lock: goose, finding no table in this role's first
			// schema, made an empty one there and tried migration 1 again.
			// That table goes.
			return 0, 0, errors.Join(serr, dropIdleVersionTable(ctx, pool))
		}
		return 0, 0, err
	}
	if len(applied) == 0 {
		// Another run applied them while this one waited for the lock.
		if st, err = Status(ctx, pool); err != nil {
			return 0, 0, err
		}
		current, _ = newestApplied(st)
		return current, current, nil
	}
	// goose applies in order, after every older migration: the one
	// before the first it applied was the newest.
	first := applied[0].Source.Version
	for _, s := range st {
		if s.Source.Version < first {
			before = max(before, s.Source.Version)
		}
	}
	return before, applied[len(applied)-1].Source.Version, nil
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

// ErrSchemaUnrecorded reports a fleetlimit schema that the version table
// on the connecting role's search path does not record: the migrations
// were run by a role whose search path put the table elsewhere (goose puts
// it in the first schema of the path). With no version table anywhere,
// [ErrVersionTableGone] is returned instead.
var ErrSchemaUnrecorded = errors.New("migrations: the fleetlimit schema exists, but no " + VersionTable +
	" on this role's search path records it (migrated by a role with another search path?)")

// ErrVersionTableGone reports a fleetlimit schema while no schema holds a
// version table (it was dropped by hand): nothing can be rolled back or
// applied until [Reset] removes the schema, with its data.
var ErrVersionTableGone = errors.New("migrations: the fleetlimit schema exists, but no schema holds a " + VersionTable +
	" to record it (dropped by hand?)")

// ErrVersionMismatch reports a version table on the search path whose
// newest applied migration is not the version the fleetlimit schema says
// it is at (fleetlimit.schema_version()): a stale table, left in one
// schema when the fleetlimit schema was dropped by hand and migrated again
// from a search path that put a new table in another. [Status] returns it,
// naming the versions and the schemas holding a version table, and how to
// get out: drop the stale table, and migrate with a search path that
// reaches the one that agrees.
var ErrVersionMismatch = errors.New("migrations: " + VersionTable + " disagrees with the fleetlimit schema")

// ErrVersionTableElsewhere reports a version table on the search path but
// not in its first schema, where goose looks for it (and would create
// another): migrate as the role that migrated, or with a search path that
// starts with the table's schema.
var ErrVersionTableElsewhere = errors.New("migrations: " + VersionTable + " is not in the first schema of this role's search path")

// ErrNoSchemaOnPath reports a search path none of whose schemas exists
// (or may be used by the migrating role), so that goose has nowhere to
// create [VersionTable]. [Up] and [DownTo] return it, naming the search
// path, before goose runs.
var ErrNoSchemaOnPath = errors.New("migrations: no schema on this role's search path exists (or may be used), " +
	"so there is none to keep " + VersionTable + " in")

// Reset rolls every migration back and then drops [VersionTable], so that
// nothing fleetlimit created is left; after [ErrSchemaGone] it only drops
// the table. The table is dropped under the lock that migrations take, and
// only while it records no applied migration whose schema still exists:
// an [Up] that ran meanwhile keeps it. After [ErrVersionTableGone] it
// drops the fleetlimit schema with all its data (as rolling back
// migration 1 does) under that lock, unless a version table is there by
// then.
func Reset(ctx context.Context, pool *pgxpool.Pool) error {
	st, err := Status(ctx, pool)
	if errors.Is(err, ErrVersionTableGone) {
		return dropUnrecordedSchema(ctx, pool)
	}
	if err != nil && !errors.Is(err, ErrSchemaGone) {
		return err
	}
	for _, s := range st { // none after ErrSchemaGone
		if s.State == goose.StateApplied {
			if err := DownTo(ctx, pool, 0); err != nil {
				return err
			}
			break
		}
	}
	return dropIdleVersionTable(ctx, pool)
}

// dropIdleVersionTable drops the version table on the search path unless
// it records an applied migration whose schema exists, under the lock
// that migrations take.
func dropIdleVersionTable(ctx context.Context, pool *pgxpool.Pool) error {
	return withLock(ctx, pool, sqlLock, sqlUnlock, func(conn *pgxpool.Conn) error {
		var live bool
		if err := conn.QueryRow(ctx, sqlLiveVersions).Scan(&live); err != nil {
			if isUndefinedTable(err) {
				return nil // another Reset dropped it
			}
			return fmt.Errorf("migrations: read %s: %w", VersionTable, err)
		}
		if live {
			return nil
		}
		if _, err := conn.Exec(ctx, sqlDropVersionTable); err != nil {
			return fmt.Errorf("migrations: drop %s: %w", VersionTable, err)
		}
		return nil
	})
}

// dropUnrecordedSchema drops the fleetlimit schema while no schema holds
// a version table, under the lock that migrations take.
func dropUnrecordedSchema(ctx context.Context, pool *pgxpool.Pool) error {
	unrecorded := false
	err := withLock(ctx, pool, sqlLock, sqlUnlock, func(conn *pgxpool.Conn) error {
		if err := conn.QueryRow(ctx, sqlUnrecordedSchema, VersionTable).Scan(&unrecorded); err != nil {
			return fmt.Errorf("migrations: look for the fleetlimit schema and %s: %w", VersionTable, err)
		}
		if !unrecorded {
			return nil
		}
		if _, err := conn.Exec(ctx, sqlDropSchema); err != nil {
			return fmt.Errorf("migrations: drop the fleetlimit schema: %w", err)
		}
		return nil
	})
	if err != nil || unrecorded {
		return err
	}
	// Dropped by another Reset, or recorded by now: what is there is
	// what Status says.
	_, err = Status(ctx, pool)
	return err
}

// withLock runs fn on a connection of pool that holds the lock that
// migrations take, taken and released by the statements lock and unlock
// (exclusive or shared).
func withLock(ctx context.Context, pool *pgxpool.Pool, lock, unlock string, fn func(*pgxpool.Conn) error) (err error) {
	conn, err := pool.Acquire(ctx)
	if err != nil {
		return fmt.Errorf("migrations: %w", err)
	}
	defer conn.Release()
	if _, err := conn.Exec(ctx, lock, LockID); err != nil {
		return fmt.Errorf("migrations: lock: %w", err)
	}
	defer func() {
		if _, uerr := conn.Exec(context.WithoutCancel(ctx), unlock, LockID); uerr != nil {
			err = errors.Join(err, fmt.Errorf("migrations: unlock: %w", uerr))
			conn.Conn().Close(context.WithoutCancel(ctx)) // a session that may hold the lock is not reused
		}
	}()
	return fn(conn)
}

// Grant gives role what a fleet node (kind "node") or an operator (kind
// "operator") needs, and nothing more, through fleetlimit.grant_role. An
// operator also gets SELECT on the version table wherever it is (the one
// on the caller's search path, or every table named [VersionTable] when
// none is on it) and USAGE on that table's schema when role lacks it: an
// operator whose search path starts with that schema reads the status
// (see [ErrSchemaUnrecorded]). Grant is the schema owner's to call; it
// grants everything or nothing.
func Grant(ctx context.Context, pool *pgxpool.Pool, role, kind string) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlGrantRole, role, kind); err != nil {
			return err
		}
		if kind != "operator" {
			return nil
		}
		type table struct {
			schema, name string
			usage        bool // role needs USAGE on schema
		}
		rows, err := tx.Query(ctx, sqlVersionTablesToGrant, VersionTable, role)
		if err != nil {
			return fmt.Errorf("look for %s: %w", VersionTable, err)
		}
		tables, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (table, error) {
			var t table
			return t, row.Scan(&t.schema, &t.name, &t.usage)
		})
		if err != nil {
			return fmt.Errorf("look for %s: %w", VersionTable, err)
		}
		grantee := pgx.Identifier{role}.Sanitize()
		for _, t := range tables {
			if t.usage {
				if _, err := tx.Exec(ctx, fmt.Sprintf(sqlGrantUsage, pgx.Identifier{t.schema}.Sanitize(), grantee)); err != nil {
					return fmt.Errorf("grant USAGE on schema %q: %w", t.schema, err)
				}
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(sqlGrantSelect, pgx.Identifier{t.schema, t.name}.Sanitize(), grantee)); err != nil {
				return fmt.Errorf("grant SELECT on %s: %w", pgx.Identifier{t.schema, t.name}.Sanitize(), err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrations: grant %s rights to %q: %w", kind, role, err)
	}
	return nil
}

// HasVersionTable reports whether a [VersionTable] is on the search path.
func HasVersionTable(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var exists bool
	if err := pool.QueryRow(ctx, sqlHasVersionTable).Scan(&exists); err != nil {
		return false, fmt.Errorf("migrations: look for %s: %w", VersionTable, err)
	}
	return exists, nil
}

// The SQL this package runs besides goose's. The version table's name is
// unqualified, as goose's own reads name it: the first on the search path.
const (
	sqlLock   = `SELECT pg_advisory_lock($1)`
	sqlUnlock = `SELECT pg_advisory_unlock($1)`
	// sqlApplied lists the applied versions as goose records them (a row
	// per applied version: goose deletes a version's row when it rolls it
	// back; version 0 is the table's own) and when each was applied. goose
	// writes the session's local time: it is read back in this session's
	// TimeZone, right when both sessions use the database's default.
	sqlApplied = `SELECT version_id, max(tstamp) AT TIME ZONE current_setting('TimeZone')
	  FROM ` + VersionTable + ` WHERE version_id > 0 GROUP BY version_id`
	sqlLockShared   = `SELECT pg_advisory_lock_shared($1)`
	sqlUnlockShared = `SELECT pg_advisory_unlock_shared($1)`
	sqlHasSchema    = `SELECT to_regnamespace('fleetlimit') IS NOT NULL`
	// sqlSchemaVersionFunc: whether fleetlimit.schema_version() exists,
	// and whether this role may call it (a qualified name would fail
	// without USAGE on the schema).
	sqlSchemaVersionFunc = `SELECT count(*) > 0,
	       coalesce(bool_and(has_schema_privilege(n.oid, 'USAGE') AND has_function_privilege(p.oid, 'EXECUTE')), false)
	  FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
	 WHERE n.nspname = 'fleetlimit' AND p.proname = 'schema_version' AND p.pronargs = 0`
	sqlSchemaVersion = `SELECT fleetlimit.schema_version()`
	// sqlVersionTables lists the schemas holding a table named $1, as
	// they are and quoted as a search path needs them, and whether it is
	// the one on the search path.
	sqlVersionTables = `SELECT n.nspname, quote_ident(n.nspname), coalesce(c.oid = to_regclass($1::text)::oid, false)
	  FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
	 WHERE c.relname = $1::text AND c.relkind = 'r' ORDER BY n.nspname`
	// sqlNewestIn takes a version table quoted by pgx.Identifier, and
	// reads its newest applied version (see sqlApplied).
	sqlNewestIn = `SELECT coalesce(max(version_id), 0) FROM %s WHERE version_id > 0`
	// sqlLiveVersions: some applied version's schema still exists.
	sqlLiveVersions = `SELECT EXISTS (SELECT 1 FROM ` + VersionTable + ` WHERE version_id > 0)
	    AND to_regnamespace('fleetlimit') IS NOT NULL`
	sqlDropVersionTable = `DROP TABLE IF EXISTS ` + VersionTable
	// sqlUnrecordedSchema: the fleetlimit schema exists, and no schema
	// holds a table named $1.
	sqlUnrecordedSchema = `SELECT to_regnamespace('fleetlimit') IS NOT NULL
	   AND NOT EXISTS (SELECT 1 FROM pg_class WHERE relname = $1::text AND relkind = 'r')`
	sqlDropSchema      = `DROP SCHEMA fleetlimit CASCADE`
	sqlHasVersionTable = `SELECT to_regclass('` + VersionTable + `') IS NOT NULL`
	// sqlVersionTablesAnywhere names the schemas holding a table named
	// $1, quoted as a search path needs them.
	sqlVersionTablesAnywhere = `SELECT coalesce(string_agg(quote_ident(n.nspname), ', ' ORDER BY n.nspname), '')
	  FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
	 WHERE c.relname = $1 AND c.relkind = 'r'`
	// sqlVersionTablePlace: the schema of the version table on the search
	// path (NULL without one), and the search path's first schema (NULL
	// when none of its schemas exists and may be used), both quoted as a
	// search path needs them; and the search path as set.
	sqlVersionTablePlace = `SELECT (SELECT quote_ident(n.nspname) FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
	                         WHERE c.oid = to_regclass('` + VersionTable + `')), quote_ident(current_schema()),
	       current_setting('search_path')`
	// sqlGrantRole hands role $1 a node's or an operator's rights ($2);
	// see fleetlimit.grant_role in the migrations.
	sqlGrantRole = `SELECT fleetlimit.grant_role($1, $2)`
	// sqlVersionTablesToGrant: the schema and name of the version table
	// $1 on the search path or, without one there, of every table named
	// $1; and whether role $2 lacks USAGE on its schema.
	sqlVersionTablesToGrant = `SELECT n.nspname, c.relname, NOT has_schema_privilege($2::text, n.oid, 'USAGE')
	  FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
	 WHERE CASE WHEN to_regclass($1::text) IS NULL THEN c.relname = $1::text AND c.relkind = 'r'
	            ELSE c.oid = to_regclass($1::text) END
	 ORDER BY n.nspname`
	// sqlGrantSelect and sqlGrantUsage take identifiers quoted by
	// pgx.Identifier: the table (schema-qualified) or schema, then the role.
	sqlGrantSelect = `GRANT SELECT ON TABLE %s TO %s`
	sqlGrantUsage  = `GRANT USAGE ON SCHEMA %s TO %s`
)

// Status reports every embedded migration and whether it is applied. It
// reads [VersionTable], the first on the search path, and creates nothing
// (goose would create the table on any call): without the table every
// migration is pending. It returns [ErrSchemaGone] when the table records
// applied migrations but the fleetlimit schema is gone,
// [ErrSchemaUnrecorded] when the schema exists but the table records
// none ([ErrVersionTableGone] when no schema holds a version table), and
// [ErrVersionMismatch] when the table's newest version is not the
// schema's.
func Status(ctx context.Context, pool *pgxpool.Pool) ([]*goose.MigrationStatus, error) {
	sources, err := sourceList()
	if err != nil {
		return nil, err
	}
	applied, err := readApplied(ctx, pool)
	if errors.Is(err, ErrSchemaGone) || errors.Is(err, ErrSchemaUnrecorded) {
		// A migration that commits between the two reads looks the
		// same: only a second look tells them apart. Each migration
		// writes its schema change and its version row in one
		// transaction.
		applied, err = readApplied(ctx, pool)
	}
	if errors.Is(err, ErrVersionMismatch) {
		// A migration running now changes the schema and its version
		// row together, but maybe between this look's two reads: look
		// again while none runs.
		applied, err = readAppliedLocked(ctx, pool)
	}
	if err != nil {
		return nil, err
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

// querier is a pool or one of its connections.
type querier interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}

// readAppliedLocked is readApplied holding the lock that migrations take,
// shared: no migration runs meanwhile.
func readAppliedLocked(ctx context.Context, pool *pgxpool.Pool) (applied map[int64]time.Time, err error) {
	err = withLock(ctx, pool, sqlLockShared, sqlUnlockShared, func(conn *pgxpool.Conn) error {
		applied, err = readApplied(ctx, conn)
		return err
	})
	return applied, err
}

// readApplied reads the applied versions, and checks them against the
// fleetlimit schema (see Status).
func readApplied(ctx context.Context, pool querier) (map[int64]time.Time, error) {
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
				return nil, fmt.Errorf("migrations: read %s: %w", VersionTable, err)
			}
			applied[v] = at
		}
		err = rows.Err()
	}
	if err != nil && !isUndefinedTable(err) {
		return nil, fmt.Errorf("migrations: read %s: %w", VersionTable, err)
	}
	var schema bool
	if err := pool.QueryRow(ctx, sqlHasSchema).Scan(&schema); err != nil {
		return nil, fmt.Errorf("migrations: look for the fleetlimit schema: %w", err)
	}
	switch {
	case len(applied) > 0 && !schema:
		return nil, ErrSchemaGone
	case len(applied) == 0 && schema:
		var where string
		if err := pool.QueryRow(ctx, sqlVersionTablesAnywhere, VersionTable).Scan(&where); err != nil {
			return nil, fmt.Errorf("%w (and looking for version tables failed: %w)", ErrSchemaUnrecorded, err)
		}
		if where == "" {
			return nil, ErrVersionTableGone
		}
		return nil, fmt.Errorf("%w: schemas holding a %s: %s", ErrSchemaUnrecorded, VersionTable, where)
	case schema:
		var newest int64
		for v := range applied {
			newest = max(newest, v)
		}
		if err := checkSchemaVersion(ctx, pool, newest); err != nil {
			return nil, err
		}
	}
	return applied, nil
}

// firstSchemaVersion is the migration that adds fleetlimit.schema_version().
const firstSchemaVersion = 4

// checkSchemaVersion returns ErrVersionMismatch when recorded, the newest
// version the version table on the search path records, is not the one
// fleetlimit.schema_version() returns, or when that function is missing
// while recorded says it should exist (and the other way round). A role
// that may not call the function is not checked.
func checkSchemaVersion(ctx context.Context, q querier, recorded int64) error {
	var exists, callable bool
	if err := q.QueryRow(ctx, sqlSchemaVersionFunc).Scan(&exists, &callable); err != nil {
		return fmt.Errorf("migrations: look for fleetlimit.schema_version(): %w", err)
	}
	if exists && !callable {
		return nil
	}
	var actual int64
	if exists {
		err := q.QueryRow(ctx, sqlSchemaVersion).Scan(&actual)
		var pgErr *pgconn.PgError
		switch {
		case errors.As(err, &pgErr) && (pgErr.Code == "42883" || pgErr.Code == "3F000"): // undefined function, schema
			exists = false // rolled back meanwhile
		case err != nil:
			return fmt.Errorf("migrations: read fleetlimit.schema_version(): %w", err)
		}
	}
	if exists && actual == recorded || !exists && recorded < firstSchemaVersion {
		return nil
	}

	type table struct {
		schema, quoted string
		onPath         bool
		newest         int64 // -1: unreadable
	}
	rows, err := q.Query(ctx, sqlVersionTables, VersionTable)
	if err != nil {
		return fmt.Errorf("%w (and looking for version tables failed: %w)", ErrVersionMismatch, err)
	}
	tables, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (table, error) {
		var t table
		return t, row.Scan(&t.schema, &t.quoted, &t.onPath)
	})
	if err != nil {
		return fmt.Errorf("%w (and looking for version tables failed: %w)", ErrVersionMismatch, err)
	}
	stale := table{quoted: "?"}
	var others, agreeing []string
	for _, t := range tables {
		if t.onPath {
			stale = t
			continue
		}
		t.newest = -1
		if err := q.QueryRow(ctx, fmt.Sprintf(sqlNewestIn, pgx.Identifier{t.schema, VersionTable}.Sanitize())).Scan(&t.newest); err != nil {
			others = append(others, fmt.Sprintf("the one in schema %s is unreadable (%v)", t.quoted, err))
			continue
		}
		others = append(others, fmt.Sprintf("the one in schema %s records version %d", t.quoted, t.newest))
		if exists && t.newest == actual {
			agreeing = append(agreeing, t.quoted)
		}
	}

	var b strings.Builder
	fmt.Fprintf(&b, "the one in schema %s records version %d, but ", stale.quoted, recorded)
	if exists {
		fmt.Fprintf(&b, "fleetlimit.schema_version() says %d", actual)
	} else {
		fmt.Fprintf(&b, "the schema has no fleetlimit.schema_version(), which version %d added", firstSchemaVersion)
	}
	if len(others) > 0 {
		fmt.Fprintf(&b, "; %s", strings.Join(others, ", "))
	}
	drop := "DROP TABLE " + pgx.Identifier{stale.schema, VersionTable}.Sanitize()
	if len(agreeing) > 0 {
		fmt.Fprintf(&b, ": drop the stale table (%s) and migrate with a search path that starts with %s", drop, agreeing[0])
	} else {
		fmt.Fprintf(&b, ": drop the stale table (%s) and look again", drop)
	}
	return fmt.Errorf("%w: %s", ErrVersionMismatch, b.String())
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
	_, pending := newestApplied(st)
	return pending > 0, nil
}

// newestApplied returns the newest applied version in st (0 for none),
// and how many migrations are pending.
func newestApplied(st []*goose.MigrationStatus) (newest int64, pending int) {
	for _, s := range st {
		if s.State == goose.StateApplied {
			newest = max(newest, s.Source.Version)
		} else {
			pending++
		}
	}
	return newest, pending
}

// isUndefinedTable reports a query on a table that does not exist.
func isUndefinedTable(err error) bool {
	var pgErr *pgconn.PgError
	return errors.As(err, &pgErr) && pgErr.Code == "42P01"
}

// withProvider runs fn with a provider on the database behind pool, once
// goose will find the version table where it is (see ErrVersionTableElsewhere).
func withProvider(ctx context.Context, pool *pgxpool.Pool, fn func(*goose.Provider) error) (err error) {
	var where, first *string
	var path string
	if err := pool.QueryRow(ctx, sqlVersionTablePlace).Scan(&where, &first, &path); err != nil {
		return fmt.Errorf("migrations: look for %s: %w", VersionTable, err)
	}
	if where != nil && (first == nil || *where != *first) {
		firstName := "none"
		if first != nil {
			firstName = *first
		}
		return fmt.Errorf("%w: it is in schema %s, and this role's first schema is %s", ErrVersionTableElsewhere, *where, firstName)
	}
	if first == nil {
		return fmt.Errorf("%w: search_path is %q; create its first schema, or use a search path that starts with a schema that exists",
			ErrNoSchemaOnPath, path)
	}
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
