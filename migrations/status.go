package migrations

import (
	"context"
	"errors"
	"fmt"
	"io/fs"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"
)

// Status reports every embedded migration and whether it is applied. It
// reads [VersionTable], the first on the search path, and creates nothing
// (goose would create the table on any call): without the table every
// migration is pending. It returns [ErrSchemaGone] when the table records
// applied migrations but the fleetlimit schema is gone,
// [ErrSchemaUnrecorded] when the schema exists but the table records
// none ([ErrVersionTableGone] when no schema holds a version table), and
// [ErrVersionMismatch] when the table's newest version is not the
// schema's. A version the table records that this build does not embed
// (a newer build migrated the database) is listed too, applied, after
// the embedded ones, with an empty Source.Path: see [Newer].
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
			delete(applied, src.Version)
		}
	}
	unknown := make([]*goose.MigrationStatus, 0, len(applied))
	for v, at := range applied {
		unknown = append(unknown, &goose.MigrationStatus{
			Source: &goose.Source{Type: goose.TypeSQL, Version: v},
			State:  goose.StateApplied, AppliedAt: at,
		})
	}
	sort.Slice(unknown, func(i, j int) bool { return unknown[i].Source.Version < unknown[j].Source.Version })
	return append(out, unknown...), nil
}

// Newer returns the newest version st (from [Status]) lists as applied
// past the newest this build embeds, and that newest; newer is 0 when no
// applied version is past it. A database a newer build
// migrated is past what this build can apply or roll back: [Up] leaves it
// as it is, and [DownTo] and [Reset] refuse it with [ErrSchemaNewer]
// (fleet nodes of this build still run on it: see coord.CheckSchema).
func Newer(st []*goose.MigrationStatus) (newer, newest int64) {
	for _, s := range st {
		if s.Source.Path != "" {
			newest = max(newest, s.Source.Version)
		}
	}
	for _, s := range st {
		if s.State == goose.StateApplied && s.Source.Version > newest {
			newer = max(newer, s.Source.Version)
		}
	}
	return newer, newest
}

// refuseNewer returns [ErrSchemaNewer], naming the versions, when st lists
// an applied version this build does not embed.
func refuseNewer(st []*goose.MigrationStatus, what string) error {
	if newer, newest := Newer(st); newer > 0 {
		return fmt.Errorf("%w: the database is at version %d, and this build's newest migration is %d: %s",
			ErrSchemaNewer, newer, newest, what)
	}
	return nil
}

// CheckGap returns [ErrVersionGap], naming the versions and how to put
// their rows back, when the version table records a migration as applied
// but not an older one, at version to or above it (0: anywhere): [Up]
// refuses any such gap, [DownTo] one at or above its version, and
// [Reset] any. It returns what [Status] returns when that fails.
func CheckGap(ctx context.Context, pool *pgxpool.Pool, to int64) error {
	st, err := Status(ctx, pool)
	if err != nil {
		return err
	}
	return refuseGap(ctx, pool, st, to)
}

// refuseGap returns [ErrVersionGap], naming every such version, when st
// lists a pending migration at or above to and older than an applied
// one: goose rolls back down to the first row at or below its target,
// so a rollback to a missing version leaves what it made behind a table
// that says the schema is older.
//
// goose rolls back in the order of the table's ids, so a row put back
// must take an id between its neighbours': the error gives the INSERT
// that does, with the ids the table leaves free there (a row deleted by
// hand left its own), or says that none is.
func refuseGap(ctx context.Context, q querier, st []*goose.MigrationStatus, to int64) error {
	newest, _ := newestApplied(st)
	var gaps []int64
	for _, s := range st {
		if s.State != goose.StateApplied && s.Source.Version < newest {
			gaps = append(gaps, s.Source.Version)
		}
	}
	if len(gaps) == 0 || slices.Max(gaps) < to {
		return nil
	}
	names := make([]string, len(gaps))
	for i, v := range gaps {
		names[i] = fmt.Sprintf("%05d", v)
	}
	err := fmt.Errorf("%w: %05d is applied, and not %s (a row deleted by hand?)", ErrVersionGap, newest, strings.Join(names, ", "))
	table, schema, qerr := versionRows(ctx, q)
	if qerr != nil {
		return fmt.Errorf("%w (and reading its ids failed: %w)", err, qerr)
	}
	name := pgx.Identifier{schema, VersionTable}.Sanitize()
	values, ok := gapRows(gaps, table)
	if !ok {
		return fmt.Errorf("%w; the ids between the neighbouring rows are taken, so a row put back would be rolled back out of "+
			"order (goose rolls back in the order of the ids): restore %s from a backup", err, name)
	}
	return fmt.Errorf("%w; if the fleetlimit schema holds what the missing migrations made, put their rows back, "+
		"at ids between their neighbours' (goose rolls back in the order of the ids): INSERT INTO %s (id, version_id, is_applied) VALUES %s",
		err, name, strings.Join(values, ", "))
}

// versionRow is a row of the version table: its id and version.
type versionRow struct{ id, version int64 }

// versionRows reads the rows of the version table on the search path, in
// the order of their ids, and its schema ("" when it has no rows).
func versionRows(ctx context.Context, q querier) (table []versionRow, schema string, err error) {
	rows, err := q.Query(ctx, sqlVersionRows)
	if err != nil {
		return nil, "", err
	}
	table, err = pgx.CollectRows(rows, func(r pgx.CollectableRow) (versionRow, error) {
		var x versionRow
		return x, r.Scan(&x.id, &x.version, &schema)
	})
	return table, schema, err
}

// gapRows returns the rows that put back the versions gaps (ascending)
// in table: each at the first id after every older version's row (and
// the one put back before it; the table's ids start at 1), and short of
// every newer version's row; false when there is no room.
func gapRows(gaps []int64, table []versionRow) ([]string, bool) {
	var values []string
	last := int64(0)
	for _, v := range gaps {
		below, above := last, int64(-1)
		for _, r := range table {
			if r.version < v {
				below = max(below, r.id)
			} else if r.version > v && (above < 0 || r.id < above) {
				above = r.id
			}
		}
		id := below + 1
		if above >= 0 && id >= above {
			return nil, false
		}
		values = append(values, fmt.Sprintf("(%d, %d, true)", id, v))
		last = id
	}
	return values, true
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
		tables, lerr := listVersionTables(ctx, pool)
		if lerr != nil {
			return nil, fmt.Errorf("%w (and looking for version tables failed: %w)", ErrSchemaUnrecorded, lerr)
		}
		if err == nil && len(tables) == 1 && tables[0].onPath {
			// The table on the search path records nothing, and it is
			// the only one: it lost its rows (deleted by hand), and the
			// mismatch gives the INSERT that puts them back.
			if err := checkSchemaVersion(ctx, pool, 0, tables); err != nil {
				return nil, err
			}
		}
		if len(tables) == 0 {
			return nil, ErrVersionTableGone
		}
		where := make([]string, len(tables))
		for i, t := range tables {
			where[i] = t.quoted
		}
		return nil, fmt.Errorf("%w: schemas holding a %s: %s", ErrSchemaUnrecorded, VersionTable, strings.Join(where, ", "))
	case schema:
		var newest int64
		for v := range applied {
			newest = max(newest, v)
		}
		if err := checkSchemaVersion(ctx, pool, newest, nil); err != nil {
			return nil, err
		}
	}
	return applied, nil
}

// firstSchemaVersion is the migration that adds fleetlimit.schema_version().
const firstSchemaVersion = 4

// listedTable is a table named VersionTable, as listVersionTables lists
// it: its schema, as it is and quoted as a search path needs it, and
// whether it is the one on the search path.
type listedTable struct {
	schema, quoted string
	onPath         bool
}

// listVersionTables lists the database's version tables, in the order of
// their schemas' names.
func listVersionTables(ctx context.Context, q querier) ([]listedTable, error) {
	rows, err := q.Query(ctx, sqlVersionTables, VersionTable)
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, func(row pgx.CollectableRow) (listedTable, error) {
		var t listedTable
		return t, row.Scan(&t.schema, &t.quoted, &t.onPath)
	})
}

// checkSchemaVersion returns ErrVersionMismatch when recorded, the newest
// version the version table on the search path records, is not the one
// fleetlimit.schema_version() returns, or when that function is missing
// while recorded says it should exist (and the other way round). A role
// that may not call the function is not checked. tables are the version
// tables (listVersionTables) when the caller has listed them; nil lists
// them when the error needs them.
func checkSchemaVersion(ctx context.Context, q querier, recorded int64, tables []listedTable) error {
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

	if tables == nil {
		var err error
		if tables, err = listVersionTables(ctx, q); err != nil {
			return fmt.Errorf("%w (and looking for version tables failed: %w)", ErrVersionMismatch, err)
		}
	}
	stale := listedTable{quoted: "?"}
	var others, agreeing []string
	for _, t := range tables {
		if t.onPath {
			stale = t
			continue
		}
		var newest int64
		if err := q.QueryRow(ctx, fmt.Sprintf(sqlNewestIn, pgx.Identifier{t.schema, VersionTable}.Sanitize())).Scan(&newest); err != nil {
			others = append(others, fmt.Sprintf("the one in schema %s is unreadable (%v)", t.quoted, err))
			continue
		}
		others = append(others, fmt.Sprintf("the one in schema %s records version %d", t.quoted, newest))
		if exists && newest == actual {
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
	staleName := pgx.Identifier{stale.schema, VersionTable}.Sanitize()
	drop := "DROP TABLE " + staleName
	if len(agreeing) > 0 {
		fmt.Fprintf(&b, ": drop the stale table (%s) and migrate with a search path that starts with %s", drop, agreeing[0])
		return fmt.Errorf("%w: %s", ErrVersionMismatch, b.String())
	}
	// A table no other agrees with may have lost its newest rows (behind
	// the schema) or outlive a schema restored from an older dump (ahead
	// of it) rather than be stale: dropping it would leave only a reset,
	// which loses every key. (Where the versions agree, or the schema
	// predates schema_version() as the table does, the check passed
	// above.)
	var fix string
	switch {
	case exists && actual > recorded:
		values, err := newestRows(ctx, q, recorded, actual)
		if err != nil {
			return fmt.Errorf("%w: %s (and reading its ids failed: %w)", ErrVersionMismatch, b.String(), err)
		}
		fix = fmt.Sprintf(", and it may have lost the rows of the newest migrations (deleted by hand?); "+
			"if the fleetlimit schema holds what they made, as schema_version() says, put the rows back: "+
			"INSERT INTO %s (id, version_id, is_applied) VALUES %s", staleName, values)
	case exists:
		fix = fmt.Sprintf(", and it may record migrations the schema no longer holds (restored from an older dump?); "+
			"if the fleetlimit schema holds what version %d made, as schema_version() says, delete the newer rows, "+
			"and up applies those migrations again: DELETE FROM %s WHERE version_id > %d", actual, staleName, actual)
	default:
		fix = fmt.Sprintf(", and it may record migrations the schema no longer holds (restored from an older dump?); "+
			"if so, delete the rows above the version the dump was taken at, V (below %d), "+
			"and up applies those migrations again: DELETE FROM %s WHERE version_id > V", firstSchemaVersion, staleName)
	}
	if len(others) == 0 {
		b.WriteString(": it is the only version table")
	} else {
		b.WriteString(": no other version table agrees with the schema")
	}
	b.WriteString(fix)
	if len(others) > 0 {
		fmt.Fprintf(&b, "; if it is a stale table instead, drop it (%s) and look again", drop)
	}
	return fmt.Errorf("%w: %s", ErrVersionMismatch, b.String())
}

// newestRows returns the rows that record versions from+1 to to as
// applied in the version table on the search path, at ids after its last:
// goose rolls back in the order of the ids, newest last.
func newestRows(ctx context.Context, q querier, from, to int64) (string, error) {
	table, _, err := versionRows(ctx, q)
	if err != nil {
		return "", err
	}
	var last int64
	for _, r := range table {
		last = max(last, r.id)
	}
	values := make([]string, 0, to-from)
	for v := from + 1; v <= to; v++ {
		last++
		values = append(values, fmt.Sprintf("(%d, %d, true)", last, v))
	}
	return strings.Join(values, ", "), nil
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
