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
// it without creating it. A database a newer build migrated is left as it
// is: Up finds nothing to do (an older process booting in a rolling
// upgrade runs on the newer schema), while [DownTo] and [Reset] refuse
// with [ErrSchemaNewer] (see [Newer]).
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
//
// The provider checks nothing before it runs: any of its runs creates
// [VersionTable] in the first schema of the search path when the path
// reaches none, and runs migrations against whatever table it finds, even
// one that disagrees with the fleetlimit schema. [Up], [UpVersions],
// [DownTo] and [Reset] refuse those states first (see [Status]); use them
// unless the state is known to be sound.
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

// LockHolder returns the process ID of another session that holds the
// lock migrations take (on [LockID]), and whether it holds it
// exclusively, as a migration or a rollback does ([Status] holds it
// shared); pid 0 when no other session holds it. A run started now would
// wait for an exclusive holder, and a migration for any. It only looks:
// the lock may change hands right after.
func LockHolder(ctx context.Context, pool *pgxpool.Pool) (pid int, exclusive bool, err error) {
	var p int32
	err = pool.QueryRow(ctx, sqlLockHolder, LockID).Scan(&p, &exclusive)
	if errors.Is(err, pgx.ErrNoRows) {
		return 0, false, nil
	}
	if err != nil {
		return 0, false, fmt.Errorf("migrations: look for the holder of the migration lock: %w", err)
	}
	return int(p), exclusive, nil
}

// Up applies every pending migration to the database behind pool. It is safe
// to call from many processes at once, and with a [Reset] under way. It
// returns what [Status] returns when the version table and the schema
// disagree, [ErrNoSchemaOnPath] when the search path has no schema for the
// version table, [ErrVersionGap] when it records a migration as applied
// but not an older one, and does nothing when nothing is pending, as on a
// database a newer build migrated (see [Newer]). A run the database
// refuses for a privilege the role lacks (a node's role, say) returns an
// error wrapping [ErrInsufficientPrivilege] that names the role to run it
// as.
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
	return before, after, ExplainPrivilege(ctx, pool, err)
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
	if err := refuseGap(ctx, pool, st, 0); err != nil {
		return 0, 0, err
	}
	var applied []*goose.MigrationResult
	err = withProvider(ctx, pool, func(p *goose.Provider) error {
		var err error
		applied, err = p.Up(ctx)
		return failedMigration(err, true)
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
// the fleetlimit schema but keeps [VersionTable] (see [Reset]). It refuses
// a database at a version this build does not embed with [ErrSchemaNewer]:
// only the build that has a migration can roll it back; and, with
// [ErrVersionGap], one whose version table records a migration as applied
// but not an older one at or above version: goose would roll back past it,
// or stop at the version below it, leaving what it made.
//
// Before goose runs, DownTo reads the state as [Status] does and refuses,
// rolling nothing back and creating nothing, with the error Status returns
// when the version table and the schema disagree: [ErrSchemaGone],
// [ErrSchemaUnrecorded], [ErrVersionTableGone] or [ErrVersionMismatch]
// (goose would otherwise create an empty version table in place of one
// dropped by hand, or roll back, through a stale table, migrations the
// schema is not at). It returns [ErrVersionTableElsewhere] when the table
// on the search path is not in its first schema, and [ErrNoSchemaOnPath]
// when no schema on the path exists. With no migration applied and none
// of these, goose creates an empty [VersionTable] in the first schema of
// the search path, as it does on any run. The check and goose's run are
// not one step: a state changed by hand, or by a run from another search
// path, in between is goose's to find. A run the database refuses for a
// privilege the role lacks returns an error wrapping
// [ErrInsufficientPrivilege] that names the role to run it as.
func DownTo(ctx context.Context, pool *pgxpool.Pool, version int64) error {
	_, _, err := DownVersions(ctx, pool, version)
	return err
}

// DownVersions is [DownTo], and reports the newest applied version before
// and after its run. Both are what the run found and left under the lock
// that migrations take: a run that waited for the lock while another
// rolled back to version or below reports before == after, as one with
// nothing to roll back does.
func DownVersions(ctx context.Context, pool *pgxpool.Pool, version int64) (before, after int64, err error) {
	before, after, err = downVersions(ctx, pool, version)
	return before, after, ExplainPrivilege(ctx, pool, err)
}

func downVersions(ctx context.Context, pool *pgxpool.Pool, version int64) (before, after int64, err error) {
	st, err := Status(ctx, pool)
	if err != nil {
		return 0, 0, err
	}
	if err := refuseNewer(st, "roll back with the build that applied the newer migrations"); err != nil {
		return 0, 0, err
	}
	if err := refuseGap(ctx, pool, st, version); err != nil {
		return 0, 0, err
	}
	var done []*goose.MigrationResult
	err = withProvider(ctx, pool, func(p *goose.Provider) error {
		var err error
		done, err = p.DownTo(ctx, version)
		return failedMigration(err, false)
	})
	if err != nil {
		return 0, 0, err
	}
	if len(done) == 0 {
		if st, err = Status(ctx, pool); err != nil {
			return 0, 0, err
		}
		current, _ := newestApplied(st)
		return current, current, nil
	}
	// goose rolls back newest first, down to an applied migration it
	// keeps: the newest of those below the last it rolled back.
	last := done[len(done)-1].Source.Version
	for _, s := range st {
		if s.State == goose.StateApplied && s.Source.Version < last {
			after = max(after, s.Source.Version)
		}
	}
	return done[0].Source.Version, after, nil
}

// failedMigration words goose's error for a migration that failed, going
// up or down (which goose calls a "partial migration error" even when it
// was the first of the run), as what happened: those of the run before it
// stay done, and the failed one, which runs in one transaction (no
// migration opts out, TestEveryMigrationIsOneTransaction), changed nothing
// when the database refused one of its statements. Any other error (the
// connection lost, maybe during the commit) leaves it unknown, and the
// error says to look. The cause stays wrapped.
func failedMigration(err error, up bool) error {
	var pe *goose.PartialError
	if !errors.As(err, &pe) || pe.Failed == nil || pe.Failed.Source == nil {
		return err
	}
	verb, done := "applying", "applied"
	if !up {
		verb, done = "rolling back", "rolled back"
	}
	before := "nothing was " + done
	switch n := len(pe.Applied); n {
	case 0:
	case 1:
		before = fmt.Sprintf("migration %05d was %s before it", pe.Applied[0].Source.Version, done)
	default:
		before = fmt.Sprintf("%d migrations were %s before it (%05d to %05d)", n, done,
			pe.Applied[0].Source.Version, pe.Applied[n-1].Source.Version)
	}
	what := "failed and changed nothing"
	if _, refused := errors.AsType[*pgconn.PgError](pe.Err); !refused {
		what = "failed, and whether it was " + done + " is unknown (see 'fleetctl migrate status')"
	}
	return fmt.Errorf("%s %05d %s; %s: %w", verb, pe.Failed.Source.Version, what, before, pe.Err)
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
// from a search path that put a new table in another; or a table that lost
// the rows of the newest migrations (deleted by hand). [Status] returns it,
// naming the versions and the schemas holding a version table, and how to
// get out: drop the stale table, and migrate with a search path that
// reaches the one that agrees; or, when no other table agrees, the INSERT
// that puts the missing rows back (a table behind the schema) or the
// DELETE that takes the rows the schema does not hold out (a table ahead
// of it: the schema restored from an older dump).
var ErrVersionMismatch = errors.New("migrations: " + VersionTable + " disagrees with the fleetlimit schema")

// ErrSchemaNewer reports a database that a newer build migrated past this
// build's newest migration: [DownTo] and [Reset] cannot roll back what
// they do not have, and refuse, changing nothing. The error names both
// versions.
var ErrSchemaNewer = errors.New("migrations: the database was migrated by a newer build")

// ErrVersionGap reports a version table that records a migration as
// applied while it records an older one as not: a row deleted by hand.
// The schema holds what the older migration made, most likely, so [Up]
// does not run it again over newer ones (which would put back the
// functions it defined as they were then), and [DownTo] (and [Reset])
// does not roll back past it or to it, which would leave what it made
// behind a table that says the schema is older; they refuse, changing
// nothing, and the error names the versions and the rows that put them
// back (see [CheckGap]).
var ErrVersionGap = errors.New("migrations: " + VersionTable + " records a migration as applied but not an older one")

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
// then. A version table with a gap ([ErrVersionGap]) is refused, as
// [DownTo] refuses it, changing nothing: the rollback would skip the
// missing migrations' own. A run the database refuses for a privilege the
// role lacks returns an error wrapping [ErrInsufficientPrivilege] that
// names the role to run it as.
func Reset(ctx context.Context, pool *pgxpool.Pool) error {
	return ExplainPrivilege(ctx, pool, reset(ctx, pool))
}

func reset(ctx context.Context, pool *pgxpool.Pool) error {
	st, err := Status(ctx, pool)
	if errors.Is(err, ErrVersionTableGone) {
		return dropUnrecordedSchema(ctx, pool)
	}
	if err != nil && !errors.Is(err, ErrSchemaGone) {
		return err
	}
	if err := refuseNewer(st, "reset with the build that applied the newer migrations"); err != nil {
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

// HasVersionTable reports whether a [VersionTable] is on the search path.
func HasVersionTable(ctx context.Context, pool *pgxpool.Pool) (bool, error) {
	var exists bool
	if err := pool.QueryRow(ctx, sqlHasVersionTable).Scan(&exists); err != nil {
		return false, fmt.Errorf("migrations: look for %s: %w", VersionTable, err)
	}
	return exists, nil
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
