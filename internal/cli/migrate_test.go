package cli

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleettest"
	"github.com/fleetlimit/fleetlimit/migrations"
)

// migrateDB is a fresh database with no schema, its DSN and a pool on it
// as the test's superuser.
type migrateDB struct {
	dsn  string
	pool *pgxpool.Pool
}

func newMigrateDB(t *testing.T) migrateDB {
	t.Helper()
	dsn := fleettest.EmptyDSN(t)
	pool, err := pgxpool.New(t.Context(), dsn)
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	return migrateDB{dsn: dsn, pool: pool}
}

// exec runs sql on the database, failing t on an error.
func (db migrateDB) exec(t *testing.T, sql string) {
	t.Helper()
	_, err := db.pool.Exec(t.Context(), sql)
	require.NoError(t, err)
}

// searchPath returns dsn with a search path set through the connection
// string's options, as migrationHint tells operators to.
func searchPath(t *testing.T, dsn, path string) string {
	t.Helper()
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	q := u.Query()
	q.Set("options", "-csearch_path="+path)
	u.RawQuery = strings.ReplaceAll(q.Encode(), "+", "%20") // pgx reads + as itself
	return u.String()
}

// loginRole creates a login role whose name needs quoting, dropped at
// cleanup, and returns its name and db's DSN as it.
func (db migrateDB) loginRole(t *testing.T) (role, dsn string) {
	t.Helper()
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	role = "Fl Op " + hex.EncodeToString(b)
	db.exec(t, "CREATE ROLE "+pgx.Identifier{role}.Sanitize()+" LOGIN PASSWORD 'fl-op-pw'")
	t.Cleanup(func() {
		ctx := context.Background()
		_, _ = db.pool.Exec(ctx, "DROP OWNED BY "+pgx.Identifier{role}.Sanitize())
		_, _ = db.pool.Exec(ctx, "DROP ROLE "+pgx.Identifier{role}.Sanitize())
	})
	u, err := url.Parse(db.dsn)
	require.NoError(t, err)
	u.User = url.UserPassword(role, "fl-op-pw")
	return role, u.String()
}

// liveKeyDB returns the DSN of a migrated database with a live node on
// key "k" (seedKey), after running sql on it as the test's superuser.
func liveKeyDB(t *testing.T, sql string) string {
	t.Helper()
	dsn := fleettest.DSN(t)
	seedKey(t, dsn)
	pool, err := pgxpool.New(t.Context(), dsn)
	require.NoError(t, err)
	defer pool.Close()
	_, err = pool.Exec(t.Context(), sql)
	require.NoError(t, err)
	return dsn
}

// fleetctlOK runs fleetctl on dsn and requires success; it returns stdout.
func fleetctlOK(t *testing.T, dsn string, args ...string) string {
	t.Helper()
	stdout, stderr, code := runCLI(t, map[string]string{EnvFleetDatabaseURL: dsn}, args...)
	require.Equal(t, ExitOK, code, "fleetctl %v: %s", args, stderr)
	return stdout
}

// TestGrantOperatorReadsTheVersionTableWhereItIs: migrated from a search
// path whose first schema is not public, the version table is kept there;
// grant operator lets the operator read it, as ErrSchemaUnrecorded's hint
// says: with a search path that starts with that schema. The USAGE that
// takes is on the whole schema, as documented; with the table in public
// no USAGE is granted.
func TestGrantOperatorReadsTheVersionTableWhereItIs(t *testing.T) {
	t.Parallel()
	db := newMigrateDB(t)
	db.exec(t, `CREATE SCHEMA "Mig Own"`)
	migrator := searchPath(t, db.dsn, `"Mig\ Own"`)
	require.Equal(t, fmt.Sprintf("migrated from version 0 to %d\n", coord.SchemaVersion), fleetctlOK(t, migrator, "migrate", "up"))
	role, operator := db.loginRole(t)
	fleetctlOK(t, migrator, "grant", "operator", role)

	_, stderr, code := runCLI(t, map[string]string{EnvFleetDatabaseURL: operator}, "migrate", "status")
	require.Equal(t, ExitFailure, code)
	require.Contains(t, stderr, `schemas holding a fleetlimit_schema_version: "Mig Own"`)
	require.Contains(t, stderr, "options=-csearch_path=SCHEMA")

	operator = searchPath(t, operator, `"Mig\ Own"`)
	require.NotContains(t, fleetctlOK(t, operator, "migrate", "status"), "pending")
	require.Equal(t, fmt.Sprintf("schema is up to date at version %d\n", coord.SchemaVersion), fleetctlOK(t, operator, "migrate", "validate"))
	var create bool
	require.NoError(t, db.pool.QueryRow(t.Context(), `SELECT has_schema_privilege($1, 'Mig Own', 'CREATE')`, role).Scan(&create))
	require.False(t, create, "the operator may not create in the migrator's schema")

	// usageGranted: role holds a grant of its own on schema.
	usageGranted := func(pool *pgxpool.Pool, schema, role string) (granted bool) {
		require.NoError(t, pool.QueryRow(t.Context(), `SELECT EXISTS (SELECT 1 FROM pg_namespace AS n, aclexplode(n.nspacl) AS a
		    WHERE n.nspname = $1 AND a.grantee = to_regrole(quote_ident($2)) AND a.privilege_type = 'USAGE')`,
			schema, role).Scan(&granted))
		return granted
	}
	require.True(t, usageGranted(db.pool, "Mig Own", role))

	// USAGE is on the whole schema, as the grant's help says: what PUBLIC
	// may run there the operator may now run; its tables stay closed.
	db.exec(t, `CREATE FUNCTION "Mig Own".open_to_public() RETURNS int LANGUAGE sql AS 'SELECT 1';
	            CREATE TABLE "Mig Own".closed (x int)`)
	op, err := pgxpool.New(t.Context(), operator)
	require.NoError(t, err)
	defer op.Close()
	var one int
	require.NoError(t, op.QueryRow(t.Context(), `SELECT "Mig Own".open_to_public()`).Scan(&one))
	_, err = op.Exec(t.Context(), `SELECT * FROM "Mig Own".closed`)
	require.ErrorContains(t, err, "permission denied for table closed")

	// Migrated with the default search path, the table is in public,
	// which every role may use: no USAGE is granted.
	pub := newMigrateDB(t)
	fleetctlOK(t, pub.dsn, "migrate", "up")
	pubRole, _ := pub.loginRole(t)
	fleetctlOK(t, pub.dsn, "grant", "operator", pubRole)
	require.False(t, usageGranted(pub.pool, "public", pubRole), "no USAGE on public granted to the operator")
	var granted bool
	require.NoError(t, pub.pool.QueryRow(t.Context(), `SELECT has_table_privilege($1, 'public.fleetlimit_schema_version', 'SELECT')`,
		pubRole).Scan(&granted))
	require.True(t, granted)

	// Granted from a search path that reaches no version table: the
	// one there is, wherever it is.
	other, _ := db.loginRole(t)
	fleetctlOK(t, db.dsn, "grant", "operator", other)
	var read bool
	require.NoError(t, db.pool.QueryRow(t.Context(), `SELECT has_table_privilege($1, '"Mig Own".fleetlimit_schema_version', 'SELECT')
	    AND has_schema_privilege($1, 'Mig Own', 'USAGE')`, other).Scan(&read))
	require.True(t, read)
}

// TestMigrateResetAfterTheVersionTableWasDroppedByHand: with the version
// table dropped by hand and the schema left, every migrate command names
// the way out, reset; reset refuses while nodes are live, asks, and then
// removes the schema; the database migrates again.
func TestMigrateResetAfterTheVersionTableWasDroppedByHand(t *testing.T) {
	t.Parallel()
	dsn := liveKeyDB(t, `DROP TABLE fleetlimit_schema_version`)

	env := map[string]string{EnvFleetDatabaseURL: dsn}
	for _, args := range [][]string{{"migrate", "up"}, {"migrate", "status"}, {"migrate", "validate"}, {"migrate", "down"}} {
		_, stderr, code := runCLI(t, env, args...)
		require.Equal(t, ExitFailure, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, "no schema holds a fleetlimit_schema_version", args)
		require.Contains(t, stderr, "run 'fleetctl migrate reset' to remove the fleetlimit schema with its data", args)
	}
	_, stderr, code := runCLI(t, env, "migrate", "reset")
	require.Equal(t, ExitFailure, code, stderr)
	require.Contains(t, stderr, "1 node is live on 1 key")
	_, stderr, code = runCLI(t, env, "migrate", "reset", "--force")
	require.Equal(t, ExitUsage, code, stderr)
	require.Contains(t, stderr, "give --yes to confirm")
	require.Contains(t, fleetctlOK(t, dsn, "nodes", "k"), "node-1", "nothing was removed")

	require.Equal(t, "the version table was gone; removed the fleetlimit schema and its data\n",
		fleetctlOK(t, dsn, "migrate", "reset", "--yes", "--force"))
	require.Equal(t, "no migration is applied; nothing to reset\n", fleetctlOK(t, dsn, "migrate", "reset"))
	require.Equal(t, fmt.Sprintf("migrated from version 0 to %d\n", coord.SchemaVersion), fleetctlOK(t, dsn, "migrate", "up"))
}

// TestConcurrentMigrateUpsSayWhatEachDid: two migrate up runs on a fresh
// database, both past their look at what is pending and waiting for the
// migration lock: one migrates and says so, the other says the schema is
// up to date, not that it migrated too.
func TestConcurrentMigrateUpsSayWhatEachDid(t *testing.T) {
	t.Parallel()
	db := newMigrateDB(t)
	holder, err := pgx.Connect(t.Context(), db.dsn)
	require.NoError(t, err)
	defer holder.Close(context.Background())
	_, err = holder.Exec(t.Context(), `SELECT pg_advisory_lock($1)`, migrations.LockID)
	require.NoError(t, err)
	// A status read whose two looks agree waits for no lock, and says
	// none.
	stdout, stderr, code := runCLI(t, map[string]string{EnvFleetDatabaseURL: db.dsn}, "migrate", "status")
	require.Equal(t, ExitOK, code, stderr)
	require.Empty(t, stderr, "status waited for nothing")
	require.Contains(t, stdout, "pending")

	type result struct {
		stdout, stderr string
		code           int
	}
	results := make(chan result, 2)
	for range cap(results) {
		go func() {
			stdout, stderr, code := runCLI(t, map[string]string{EnvFleetDatabaseURL: db.dsn}, "migrate", "up")
			results <- result{stdout, stderr, code}
		}()
	}
	require.Eventually(t, func() bool {
		var waiting int
		err := db.pool.QueryRow(t.Context(), `SELECT count(*) FROM pg_stat_activity
		  WHERE datname = current_database() AND application_name = 'fleetctl' AND query LIKE '%pg_try_advisory_lock%'`).Scan(&waiting)
		return err == nil && waiting == 2
	}, 30*time.Second, 20*time.Millisecond, "both runs wait for the lock")
	_, err = holder.Exec(t.Context(), `SELECT pg_advisory_unlock($1)`, migrations.LockID)
	require.NoError(t, err)

	var said []string
	for range cap(results) {
		r := <-results
		require.Equal(t, ExitOK, r.code, r.stderr)
		require.Equal(t, fmt.Sprintf("waiting for the migration lock, which another session (pid %d) holds: "+
			"a migration or a rollback running elsewhere (Ctrl-C stops waiting)\n", holder.PgConn().PID()), r.stderr,
			"each run said what it waited for")
		said = append(said, r.stdout)
	}
	require.ElementsMatch(t, []string{fmt.Sprintf("migrated from version 0 to %d\n", coord.SchemaVersion), fmt.Sprintf("schema is up to date at version %d\n", coord.SchemaVersion)}, said)
	_, stderr, code = runCLI(t, map[string]string{EnvFleetDatabaseURL: db.dsn}, "migrate", "up")
	require.Equal(t, ExitOK, code, stderr)
	require.Empty(t, stderr, "nothing said when the lock is free")
	_, err = holder.Exec(t.Context(), `SELECT pg_advisory_lock($1)`, migrations.LockID)
	require.NoError(t, err)
	stdout, stderr, code = runCLI(t, map[string]string{EnvFleetDatabaseURL: db.dsn}, "migrate", "up")
	require.Equal(t, ExitOK, code, stderr)
	require.Empty(t, stderr, "nothing pending: up takes no lock, and says none")
	require.Equal(t, fmt.Sprintf("schema is up to date at version %d\n", coord.SchemaVersion), stdout)
	_, err = holder.Exec(t.Context(), `SELECT pg_advisory_unlock($1)`, migrations.LockID)
	require.NoError(t, err)

	// Nothing is said for a lock that nothing here waits for: the same
	// lock in another database of the cluster (advisory locks are per
	// database), or a shared holder (a status read).
	other, err := pgx.Connect(t.Context(), newMigrateDB(t).dsn)
	require.NoError(t, err)
	defer other.Close(context.Background())
	_, err = other.Exec(t.Context(), `SELECT pg_advisory_lock($1)`, migrations.LockID)
	require.NoError(t, err)
	_, err = holder.Exec(t.Context(), `SELECT pg_advisory_lock_shared($1)`, migrations.LockID)
	require.NoError(t, err)
	for _, args := range [][]string{{"migrate", "up"}, {"migrate", "status"}} {
		_, stderr, code = runCLI(t, map[string]string{EnvFleetDatabaseURL: db.dsn}, args...)
		require.Equal(t, ExitOK, code, stderr)
		require.Empty(t, stderr, "%v: no wait to speak of", args)
	}
}

// TestHeldRefusal: migrate's refusal while capacity is held says what
// is held (slots, evicted instances' rate shares, in number), on which
// keys (three at most) and what to wait for.
func TestHeldRefusal(t *testing.T) {
	t.Parallel()
	const tail = " (the rows, with their HOLD and LEASE, are in 'fleetctl nodes KEY'): after resetting that capacity " +
		"could be granted again beside those requests; wait until "
	for _, tt := range []struct {
		u    schemaUse
		want string
	}{
		{schemaUse{held: 1, heldSlots: 1, heldSlotRows: 1, heldKeys: []string{"k"}},
			`1 row of nodes that expired, left or were evicted still holds capacity (1 slot) for requests that may still run, on key "k"` +
				tail + "1 row's hold ends, or give --force"},
		{schemaUse{held: 5, heldRated: 5, heldKeys: []string{"a", "b", "c", "d"}},
			`5 rows of nodes that expired, left or were evicted still hold capacity (5 evicted instances' rate shares) for requests that may still run, on keys "a", "b", "c" and others` +
				tail + "5 evicted instances' leases end, or give --force"},
		{schemaUse{held: 2, heldSlots: 7, heldSlotRows: 1, heldRated: 1, heldKeys: []string{"held", "rated"}},
			`2 rows of nodes that expired, left or were evicted still hold capacity (7 slots and 1 evicted instance's rate share) for requests that may still run, on keys "held", "rated"` +
				tail + "1 row's hold ends and 1 evicted instance's lease ends, or give --force"},
		{schemaUse{held: 3, heldSlots: 9, heldSlotRows: 3, heldKeys: []string{"a", "b", "c"}},
			`3 rows of nodes that expired, left or were evicted still hold capacity (9 slots) for requests that may still run, on keys "a", "b", "c"` +
				tail + "3 rows' holds end, or give --force"},
	} {
		require.EqualError(t, heldRefusal(tt.u, "resetting"), tt.want)
	}
}

// TestMigrateOnASchemaNewerThanThisFleetctl: a database one migration past
// this fleetctl's newest says so in every migrate command, applies
// nothing, and refuses to roll back or reset what this fleetctl does not
// have — before it checks for live nodes — leaving the schema and the
// key's nodes as they were.
func TestMigrateOnASchemaNewerThanThisFleetctl(t *testing.T) {
	t.Parallel()
	newer := coord.SchemaVersion + 1
	dsn := liveKeyDB(t, fmt.Sprintf(`
		INSERT INTO fleetlimit_schema_version (version_id, is_applied) VALUES (%d, true);
		CREATE OR REPLACE FUNCTION fleetlimit.schema_version()
		RETURNS integer LANGUAGE sql IMMUTABLE AS $$ SELECT %d $$`, newer, newer))

	atNewer := fmt.Sprintf("schema is at version %d, newer than this fleetctl's newest migration (%d): nothing to apply; "+
		"roll back or reset with a fleetctl that has version %d\n", newer, coord.SchemaVersion, newer)
	require.Equal(t, atNewer, fleetctlOK(t, dsn, "migrate", "up"))
	require.Equal(t, atNewer, fleetctlOK(t, dsn, "migrate", "validate"))
	status := fleetctlOK(t, dsn, "migrate", "status")
	lines := strings.Split(strings.TrimSpace(status), "\n")
	last := strings.Fields(lines[len(lines)-1])
	require.Equal(t, []string{strconv.Itoa(newer), "applied"}, last[:2], status)
	require.Contains(t, lines[len(lines)-1], "(not in this fleetctl: a newer one applied it)")
	js := fleetctlOK(t, dsn, "migrate", "status", "-o", "json")
	var views []migrationView
	require.NoError(t, json.Unmarshal([]byte(js), &views))
	require.Len(t, views, newer)
	require.Equal(t, migrationView{Version: int64(newer), State: "applied"}, migrationView{
		Version: views[newer-1].Version, Name: views[newer-1].Name, State: views[newer-1].State})
	require.NotNil(t, views[newer-1].AppliedAt)

	env := map[string]string{EnvFleetDatabaseURL: dsn}
	for _, args := range [][]string{
		{"migrate", "down"}, {"migrate", "down", "--to", "5", "--force"}, {"migrate", "reset", "--yes", "--force"},
	} {
		_, stderr, code := runCLI(t, env, args...)
		require.Equal(t, ExitFailure, code, "%v: %s", args, stderr)
		require.Contains(t, stderr, fmt.Sprintf("the database is at version %d, and this fleetctl's newest migration is %d: ",
			newer, coord.SchemaVersion), args)
		require.Contains(t, stderr, fmt.Sprintf("with a fleetctl that has version %d", newer), args)
		require.NotContains(t, stderr, "live", args)
	}
	require.Equal(t, atNewer, fleetctlOK(t, dsn, "migrate", "validate"), "nothing was rolled back")
	require.Contains(t, fleetctlOK(t, dsn, "nodes", "k"), "node-1", "nothing was removed")
}

// TestInterruptedUpSaysWhereItStopped: a migrate up whose context ended
// says the version the schema is at and how many migrations are left,
// not a bare "interrupted".
func TestInterruptedUpSaysWhereItStopped(t *testing.T) {
	t.Parallel()
	db := newMigrateDB(t)
	fleetctlOK(t, db.dsn, "migrate", "up")
	fleetctlOK(t, db.dsn, "migrate", "down", "--to", "5")
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	var said bytes.Buffer
	require.Equal(t, ExitFailure, exitCode(&said, inCommand("migrate up", interruptedUp(ctx, db.pool, ctx.Err()))))
	require.Equal(t, fmt.Sprintf("fleetctl: migrate up: interrupted at version 5, with %d migrations pending (each migration is "+
		"applied whole or not at all): run 'fleetctl migrate up' again to apply the rest\n", coord.SchemaVersion-5), said.String())

	fleetctlOK(t, db.dsn, "migrate", "up")
	said.Reset()
	exitCode(&said, inCommand("migrate up", interruptedUp(ctx, db.pool, ctx.Err())))
	require.Equal(t, fmt.Sprintf("fleetctl: migrate up: interrupted, after every migration was applied: the schema is at version %d\n",
		coord.SchemaVersion), said.String())
}

// TestDemoAsAnOperatorSaysOnlyWhatFailed: the demo run by a role without
// a node's rights fails at its first node's heartbeat, which made no key,
// and says only that: not that its key is left in the database.
func TestDemoAsAnOperatorSaysOnlyWhatFailed(t *testing.T) {
	t.Parallel()
	db := newMigrateDB(t)
	fleetctlOK(t, db.dsn, "migrate", "up")
	role, operator := db.loginRole(t)
	fleetctlOK(t, db.dsn, "grant", "operator", role)
	_, stderr, code := runCLI(t, nil, "demo", "--database-url", operator, "--duration", "3s")
	require.Equal(t, ExitFailure, code, stderr)
	require.Contains(t, stderr, "the role lacks the rights")
	require.NotContains(t, stderr, "left in the database")
	var keys int
	require.NoError(t, db.pool.QueryRow(t.Context(), `SELECT count(*) FROM fleetlimit.keys`).Scan(&keys))
	require.Zero(t, keys)
}

// TestMigrateDownAndResetWithoutTheRightsNameTheOwner: down and reset run
// as a node's role are refused at fleetctl's own first read of the
// version table, and as a role that may read only that table at its count
// of live nodes; either is told, as migrate up is, which role was refused
// and which to migrate as, once, and nothing changes.
func TestMigrateDownAndResetWithoutTheRightsNameTheOwner(t *testing.T) {
	t.Parallel()
	db := newMigrateDB(t)
	fleetctlOK(t, db.dsn, "migrate", "up")
	var owner string
	require.NoError(t, db.pool.QueryRow(t.Context(), `SELECT nspowner::regrole::text FROM pg_namespace WHERE nspname = 'fleetlimit'`).Scan(&owner))
	node, nodeDSN := db.loginRole(t)
	fleetctlOK(t, db.dsn, "grant", "node", node)
	reader, readerDSN := db.loginRole(t)
	db.exec(t, "GRANT SELECT ON fleetlimit_schema_version TO "+pgx.Identifier{reader}.Sanitize())
	before := fleetctlOK(t, db.dsn, "migrate", "status")

	for _, tt := range []struct{ role, dsn, refused string }{
		{node, nodeDSN, "permission denied for table fleetlimit_schema_version"},
		{reader, readerDSN, "permission denied for schema fleetlimit"},
	} {
		mayNot := fmt.Sprintf("the role lacks a privilege that migrating takes: role %q does not own the fleetlimit schema "+
			"(a node's or an operator's rights do not include changing it); run migrations as its owner, %q", tt.role, owner)
		for _, args := range [][]string{
			{"migrate", "down"}, {"migrate", "down", "--to", "5", "--force"}, {"migrate", "reset", "--yes", "--force"},
		} {
			_, stderr, code := runCLI(t, map[string]string{EnvFleetDatabaseURL: tt.dsn}, args...)
			require.Equal(t, ExitFailure, code, "%v: %s", args, stderr)
			require.Contains(t, stderr, tt.refused, args)
			require.Contains(t, stderr, mayNot, args)
			require.NotContains(t, stderr, "(run 'fleetctl migrate' as the owner", "said once: %v", args)
		}
	}
	require.Equal(t, before, fleetctlOK(t, db.dsn, "migrate", "status"), "nothing changed")
}
