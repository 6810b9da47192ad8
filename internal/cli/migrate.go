package cli

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"path"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"
	ucli "github.com/urfave/cli/v2"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/migrations"
)

func (r *runner) migrateCommand() *ucli.Command {
	return &ucli.Command{
		Name:   "migrate",
		Usage:  "apply, roll back, list or check the fleetlimit schema's migrations",
		Action: r.unknownCommand,
		Subcommands: []*ucli.Command{
			{
				Name:  "up",
				Usage: "apply every pending migration",
				Action: r.action(func(c *ucli.Context) error {
					return r.withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
						if pending, err := migrations.HasPending(ctx, pool); err != nil || pending {
							r.noteMigrationLock(ctx, pool) // with nothing pending, up takes no lock
						}
						before, after, err := migrations.UpVersions(ctx, pool)
						if err != nil && ctx.Err() != nil {
							return interruptedUp(ctx, pool, err)
						}
						if err != nil {
							return migrationHint(err)
						}
						if after == before {
							r.printf("%s\n", upToDate(after))
						} else {
							r.printf("migrated from version %d to %d\n", before, after)
						}
						return nil
					})
				}),
			},
			{
				Name:  "down",
				Usage: "roll back the newest applied migration, or down to --to VERSION (at least 1; 'migrate reset' removes everything)",
				Description: `down refuses while nodes are live on any key unless --force: the schema
they heartbeat into would change under them, and their fleets fail closed.
It refuses too while rows of nodes that expired, left or were evicted hold
capacity for requests that may still run (slots, HELD in 'fleetctl keys',
or an evicted node's rate share; the rows are in 'fleetctl nodes KEY'): an
older schema guards them less (below version 10 its delete_key throws
them away, below version 3 their holds go). Rolling back drops what the
newer migrations added, with its data (the operator's rates, for one): a
later 'migrate up' adds it back empty. Below version 4 that includes rights
'fleetctl grant' gave: grant them again after 'migrate up'. 'fleetctl keys'
and 'fleetctl nodes' read the schemas from version 6 on; 'keys delete'
refuses any schema older than this fleetctl's.`,
				Flags: []ucli.Flag{
					decimalFlag("to", "the version to roll back to, >= 1", "one step back", fmt.Sprintf("1..%d", coord.SchemaVersion)),
					&ucli.BoolFlag{Name: "force", Usage: "roll back even while nodes are live or capacity is held"},
				},
				Action: r.action(func(c *ucli.Context) error {
					to := decimalValue(c, "to")
					if c.IsSet("to") && to < 1 {
						return usageErrorf("invalid value %d for --to: want >= 1 (use 'fleetctl migrate reset' to remove the whole schema)", to)
					}
					if c.IsSet("to") && to > coord.SchemaVersion {
						return usageErrorf("invalid value %d for --to: no such migration (the newest is %d)", to, coord.SchemaVersion)
					}
					return r.withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
						r.noteMigrationLock(ctx, pool)
						applied, err := appliedVersions(ctx, pool)
						if err != nil {
							return err
						}
						if len(applied) == 0 {
							r.printf("no migration is applied; nothing to roll back\n")
							return nil
						}
						before := applied[len(applied)-1]
						if err := refuseNewer(before, "roll back"); err != nil {
							return err
						}
						if !c.IsSet("to") {
							if len(applied) == 1 {
								if err := migrations.CheckGap(ctx, pool, 0); err != nil {
									return runHint(ctx, pool, err) // not the first migration, but a lone row
								}
								return fmt.Errorf("version %d is the first migration: rolling it back removes the whole "+
									"schema and every key; use 'fleetctl migrate reset'", before)
							}
							to = applied[len(applied)-2]
						}
						if to < before {
							if err := migrations.CheckGap(ctx, pool, to); err != nil {
								return runHint(ctx, pool, err)
							}
							if _, err := refuseLive(ctx, pool, "rolling the schema back", c.Bool("force")); err != nil {
								return err
							}
						}
						before, after, err := migrations.DownVersions(ctx, pool, to)
						if err != nil {
							return migrationHint(err)
						}
						if after == before {
							r.printf("schema is at version %d; nothing to roll back\n", after)
						} else {
							r.printf("rolled back from version %d to %d\n", before, after)
							if before >= grantsVersion && after < grantsVersion {
								r.printf("rights that 'fleetctl grant' gave went with the functions rolled back: after 'fleetctl migrate up', " +
									"run 'fleetctl grant' again for each node and operator role\n")
							}
						}
						return nil
					})
				}),
			},
			{
				Name:  "reset",
				Usage: "remove the whole fleetlimit schema and its data: every key, override and node",
				Description: `reset rolls every migration back and drops the version table
(fleetlimit_schema_version), so nothing fleetlimit created is left. It asks
for confirmation on a terminal and needs --yes otherwise. It refuses while
nodes are live on any key (their fleets would fail closed), and while rows
of nodes that expired, left or were evicted hold capacity for requests
that may still run (a schema migrated up again would grant it beside
them), unless --force.
A version table left alone (no migration applied, or the fleetlimit schema
dropped by hand) holds no data: it is removed without asking. A fleetlimit
schema whose version table was dropped by hand is removed as a whole, after
the same confirmation and checks. A version table missing an older
migration's row while newer ones stay is refused (as by 'migrate up'),
with the rows that put it back.`,
				Flags: []ucli.Flag{
					&ucli.BoolFlag{Name: "yes", Usage: "do not ask for confirmation"},
					&ucli.BoolFlag{Name: "force", Usage: "reset even while nodes are live or capacity is held"},
				},
				Action: r.action(func(c *ucli.Context) error {
					return r.withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
						r.noteMigrationLock(ctx, pool)
						current, _, err := schemaVersion(ctx, pool)
						gone := errors.Is(err, migrations.ErrSchemaGone)
						unrecorded := errors.Is(err, migrations.ErrVersionTableGone)
						if err != nil && !gone && !unrecorded {
							return runHint(ctx, pool, err)
						}
						if current == 0 && !unrecorded {
							// Nothing is left to lose but, maybe, the version
							// table: no migration applied, or the schema
							// dropped by hand.
							table, err := migrations.HasVersionTable(ctx, pool)
							if err != nil {
								return err
							}
							if !table {
								r.printf("no migration is applied; nothing to reset\n")
								return nil
							}
							if err := migrations.Reset(ctx, pool); err != nil {
								return migrationHint(err)
							}
							if gone {
								r.printf("the fleetlimit schema was already gone; removed its version table\n")
							} else {
								r.printf("no migration is applied; removed the empty version table\n")
							}
							return nil
						}
						if err := refuseNewer(current, "reset"); err != nil {
							return err
						}
						if !unrecorded {
							if err := migrations.CheckGap(ctx, pool, 0); err != nil {
								return runHint(ctx, pool, err)
							}
						}
						use, err := refuseLive(ctx, pool, "resetting", c.Bool("force"))
						if err != nil {
							return err
						}
						if !c.Bool("yes") {
							if !r.stdinIsTerminal() {
								return usageErrorf("reset removes every key, override and node: give --yes to confirm")
							}
							fmt.Fprintf(r.env.Stderr, "This removes the fleetlimit schema and all its data (%s, %s). Type 'reset' to confirm: ", plural(use.keys, "key", "keys"), plural(use.live, "live node", "live nodes"))
							answer, _ := bufio.NewReader(r.env.Stdin).ReadString('\n')
							if strings.TrimSpace(answer) != "reset" {
								return errors.New("not confirmed; nothing was changed")
							}
							// Nodes may have joined while the question waited.
							if _, err := refuseLive(ctx, pool, "resetting", c.Bool("force")); err != nil {
								return err
							}
						}
						if err := migrations.Reset(ctx, pool); err != nil {
							return migrationHint(err)
						}
						if unrecorded {
							r.printf("the version table was gone; removed the fleetlimit schema and its data\n")
							return nil
						}
						r.printf("rolled back from version %d to 0: the fleetlimit schema and its version table are gone\n", current)
						return nil
					})
				}),
			},
			{
				Name:  "status",
				Usage: "list every migration and whether it is applied",
				Description: `JSON: an array of {version, name, state ("applied" or "pending"),
applied_at (null when pending)}. A version a newer fleetctl applied, which
this one does not have, is listed last with an empty name.`,
				Flags: []ucli.Flag{outputFlag()},
				Action: r.action(func(c *ucli.Context) error {
					format, err := outputFormat(c)
					if err != nil {
						return err
					}
					return r.withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
						// No note of the lock: a status read waits for it
						// only when its two looks disagree (a migration
						// committed between them), not whenever a run
						// holds it.
						st, err := migrations.Status(ctx, pool)
						if err != nil {
							return readHint(migrationHint(err))
						}
						views := newMigrationViews(st)
						if format == formatJSON {
							return writeJSON(r.env.Stdout, views)
						}
						t := newTable(r.env.Stdout, "VERSION", "STATE", "APPLIED_AT", "NAME")
						for _, v := range views {
							at := "-"
							if v.AppliedAt != nil {
								at = v.AppliedAt.Format(time.RFC3339)
							}
							name := v.Name
							if name == "" {
								name = "(not in this fleetctl: a newer one applied it)"
							}
							t.row(strconv.FormatInt(v.Version, 10), v.State, at, name)
						}
						return t.flush()
					})
				}),
			},
			{
				Name:  "validate",
				Usage: "exit with status 3 when migrations are pending, 0 when the schema is up to date (1 on an error: a version table missing an older migration's row, for one)",
				Action: r.action(func(c *ucli.Context) error {
					return r.withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
						current, pending, err := schemaVersion(ctx, pool)
						if err != nil {
							return readHint(migrationHint(err))
						}
						if pending > 0 {
							if err := migrations.CheckGap(ctx, pool, 0); err != nil {
								return readHint(err) // up would refuse it
							}
							return checkFailedf("%d migration(s) pending: schema at version %d; run 'fleetctl migrate up'", pending, current)
						}
						r.printf("%s\n", upToDate(current))
						return nil
					})
				}),
			},
		},
	}
}

// withPool connects and runs fn with the pool, which it then closes.
func (r *runner) withPool(c *ucli.Context, fn func(ctx context.Context, pool *pgxpool.Pool) error) error {
	if _, err := wantArgs(c); err != nil {
		return err
	}
	pool, err := r.openPool(c)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(c.Context, pool)
}

// grantsVersion is the oldest migration whose down drops functions that
// only grant_role grants, and which a later up re-creates without them:
// 00004_least_privilege's down drops most of the functions a node's and
// an operator's rights are on. The newer ones that drop functions grant
// them again on the way up, to the roles that hold the rights they go
// with (00005_rates, for one, gives set_rates to those that may run
// set_limits; migrations.TestRollbackKeepsRights).
const grantsVersion = 4

// appliedVersions returns the applied migration versions, ascending, for
// a rollback: its error has runHint's advice.
func appliedVersions(ctx context.Context, pool *pgxpool.Pool) ([]int64, error) {
	st, err := migrations.Status(ctx, pool)
	if err != nil {
		return nil, runHint(ctx, pool, err)
	}
	var out []int64
	for _, s := range st {
		if s.State == goose.StateApplied {
			out = append(out, s.Source.Version)
		}
	}
	slices.Sort(out)
	return out, nil
}

// schemaUse is what a schema change would take from under the fleets:
// how many keys there are, how many of them have live member nodes, how
// many such nodes, and the capacity rows that are no member still hold.
type schemaUse struct {
	keys, liveKeys, live int
	// held counts the rows that are no member but hold capacity;
	// heldSlots their slots and heldSlotRows the rows that hold any,
	// heldRated the rows that hold a rate share (evicted instances whose
	// lease runs), heldKeys the first four keys they are on, in byte order.
	held, heldSlots, heldSlotRows, heldRated int
	heldKeys                                 []string
}

// liveNodes counts the keys and their live member nodes: rows whose lease
// runs and that are not evicted (a node that left ended its lease); and
// the rows that are no member but still hold capacity for requests that
// may still run, as 'fleetctl keys delete' refuses for (schema 10): slots
// until their hold ends, an evicted row's rate share while its lease
// runs. It reads the columns of later migrations through to_jsonb, so
// that it counts them on every schema a rollback passes through (a
// column not there yet holds nothing); no schema counts none. It is read
// on the way to a rollback or a reset: a refusal for a privilege the role
// lacks names the role to migrate as (migrations.ExplainPrivilege).
func liveNodes(ctx context.Context, pool *pgxpool.Pool) (schemaUse, error) {
	var u schemaUse
	err := pool.QueryRow(ctx, sqlLiveNodes).Scan(&u.keys, &u.liveKeys, &u.live, &u.held, &u.heldSlots, &u.heldSlotRows, &u.heldRated, &u.heldKeys)
	if code := sqlState(err); code == "42P01" || code == "3F000" { // undefined table, schema
		return schemaUse{}, nil
	}
	if err != nil {
		return schemaUse{}, migrations.ExplainPrivilege(ctx, pool, fmt.Errorf("counting live nodes: %w", err))
	}
	return u, nil
}

const sqlLiveNodes = `
SELECT (SELECT count(*) FROM fleetlimit.keys),
       count(DISTINCT n.key) FILTER (WHERE m.live), count(*) FILTER (WHERE m.live),
       count(*) FILTER (WHERE h.held), coalesce(sum(m.slots) FILTER (WHERE h.held AND m.slotsHeld), 0),
       count(*) FILTER (WHERE h.held AND m.slotsHeld), count(*) FILTER (WHERE h.held AND m.ratesHeld),
       coalesce((array_agg(DISTINCT n.key COLLATE "C" ORDER BY n.key COLLATE "C") FILTER (WHERE h.held))[1:4], '{}')
  FROM fleetlimit.nodes AS n
 CROSS JOIN LATERAL (SELECT to_jsonb(n) AS j) AS r
 CROSS JOIN LATERAL (SELECT n.lease_expires_at > now() AND NOT n.evicted AS live,
                            greatest(n.unacked_high, n.share, n.inflight) AS slots,
                            n.lease_expires_at > now() AND NOT n.evicted
                                AND NOT coalesce((r.j->>'departed')::boolean, false) AS member,
                            coalesce((r.j->>'hold_until')::timestamptz > now(), false)
                                AND greatest(n.unacked_high, n.share, n.inflight) > 0 AS slotsHeld,
                            n.lease_expires_at > now() AND NOT coalesce((r.j->>'departed')::boolean, false)
                                AND greatest(coalesce((r.j->>'rpm_high')::bigint, 0), coalesce((r.j->>'rpm_share')::bigint, 0),
                                             coalesce((r.j->>'tpm_high')::bigint, 0), coalesce((r.j->>'tpm_share')::bigint, 0)) > 0 AS ratesHeld) AS m
 CROSS JOIN LATERAL (SELECT NOT m.member AND (m.slotsHeld OR m.ratesHeld) AS held) AS h`

// readHint adds to the error of a command that only reads the migrations
// (status, validate), when the role lacked a privilege, that an operator
// role may read them too.
func readHint(err error) error {
	if sqlState(err) == sqlInsufficientPrivilege {
		return fmt.Errorf("%w; to read the migrations only, a role granted operator rights will do (fleetctl grant operator ROLE, as the owner)", err)
	}
	return err
}

// runHint is migrationHint for the error of a read on the way to a
// migration run (down's, reset's): a refusal for a privilege the role
// lacks names the role refused and the role to migrate as, as the run's
// own refusal would (migrations.ExplainPrivilege).
func runHint(ctx context.Context, pool *pgxpool.Pool, err error) error {
	return migrationHint(migrations.ExplainPrivilege(ctx, pool, err))
}

// migrationHint adds to a migration's error what to do: when the role lacked
// a privilege, that migrations run as the schema owner (the migrations
// package says so itself, naming the roles, for a run of its own and for
// the reads runHint explains: see migrations.ErrInsufficientPrivilege);
// when the schema or its version table was dropped by hand, that reset
// clears what is left; when the
// version table is not where this role's search path looks, which role or
// search path to migrate with; when it is stale, or the search path has no
// schema to keep it in, how to set a search path.
func migrationHint(err error) error {
	switch {
	case errors.Is(err, migrations.ErrInsufficientPrivilege):
		return err
	case sqlState(err) == sqlInsufficientPrivilege:
		return fmt.Errorf("%w (run 'fleetctl migrate' as the owner of the fleetlimit schema)", err)
	case errors.Is(err, migrations.ErrSchemaGone):
		return fmt.Errorf("%w: run 'fleetctl migrate reset' to remove the version table, then 'fleetctl migrate up'", err)
	case errors.Is(err, migrations.ErrVersionTableGone):
		return fmt.Errorf("%w: run 'fleetctl migrate reset' to remove the fleetlimit schema with its data "+
			"(every key, override and node), then 'fleetctl migrate up'", err)
	case errors.Is(err, migrations.ErrVersionMismatch), errors.Is(err, migrations.ErrNoSchemaOnPath):
		return fmt.Errorf("%w (a search path is set with options=-csearch_path=SCHEMA in the connection string)", err)
	case errors.Is(err, migrations.ErrSchemaUnrecorded), errors.Is(err, migrations.ErrVersionTableElsewhere):
		return fmt.Errorf("%w: run 'fleetctl migrate' as the role that migrated, or put the version table's schema "+
			"first on the search path (options=-csearch_path=SCHEMA in the connection string)", err)
	}
	return err
}

// refuseLive counts the live nodes and the rows holding capacity (see
// liveNodes) and returns, with the counts, the error that stops a schema
// change (what: "resetting", "rolling the schema back") while there are
// any, unless force.
func refuseLive(ctx context.Context, pool *pgxpool.Pool, what string, force bool) (schemaUse, error) {
	u, err := liveNodes(ctx, pool)
	switch {
	case err != nil || force:
		return u, err
	case u.live > 0:
		return u, fmt.Errorf("%s live on %s: %s now would fail their fleets closed; stop them first, or give --force",
			plural(u.live, "node is", "nodes are"), plural(u.liveKeys, "key", "keys"), what)
	case u.held > 0:
		return u, heldRefusal(u, what)
	}
	return u, nil
}

// heldRefusal is refuseLive's error for u's rows that are no member but
// hold capacity (u.held > 0): what they hold, on which keys (the first
// three in byte order), and what to wait for.
func heldRefusal(u schemaUse, what string) error {
	var holds, waits []string
	if u.heldSlots > 0 {
		holds = append(holds, plural(u.heldSlots, "slot", "slots"))
		waits = append(waits, plural(u.heldSlotRows, "row's hold ends", "rows' holds end"))
	}
	if u.heldRated > 0 {
		holds = append(holds, plural(u.heldRated, "evicted instance's rate share", "evicted instances' rate shares"))
		waits = append(waits, plural(u.heldRated, "evicted instance's lease ends", "evicted instances' leases end"))
	}
	keys := make([]string, 0, 3)
	for _, k := range u.heldKeys[:min(len(u.heldKeys), 3)] {
		keys = append(keys, strconv.Quote(k))
	}
	on := "key " + strings.Join(keys, ", ")
	if len(u.heldKeys) > 1 {
		on = "keys " + strings.Join(keys, ", ")
	}
	if len(u.heldKeys) > 3 {
		on += " and others"
	}
	verb := "hold"
	if u.held == 1 {
		verb = "holds"
	}
	return fmt.Errorf("%s of nodes that expired, left or were evicted still %s capacity (%s) for requests that may "+
		"still run, on %s (the rows, with their HOLD and LEASE, are in 'fleetctl nodes KEY'): after %s that capacity "+
		"could be granted again beside those requests; wait until %s, or give --force",
		plural(u.held, "row", "rows"), verb, strings.Join(holds, " and "), on, what, strings.Join(waits, " and "))
}

// plural returns n with the singular or plural noun.
func plural(n int, one, many string) string {
	if n == 1 {
		return "1 " + one
	}
	return strconv.Itoa(n) + " " + many
}

// schemaVersion returns the newest applied migration version (0 for none)
// and how many embedded migrations are not applied. Its error is
// migrations.Status's, without advice.
func schemaVersion(ctx context.Context, pool *pgxpool.Pool) (current int64, pending int, err error) {
	st, err := migrations.Status(ctx, pool)
	if err != nil {
		return 0, 0, err
	}
	for _, s := range st {
		if s.State == goose.StateApplied {
			current = max(current, s.Source.Version)
		} else {
			pending++
		}
	}
	return current, pending, nil
}

// interruptedUp is the error of a migrate up that its context ended
// (Ctrl-C) with err: the version it reached and what is left. Every
// migration runs in one transaction, so the schema is at one version;
// when reading it fails too, err stands, with migrationHint's advice.
func interruptedUp(ctx context.Context, pool *pgxpool.Pool, err error) error {
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	current, pending, serr := schemaVersion(rctx, pool)
	if serr != nil {
		return migrationHint(err)
	}
	// Not wrapping context.Canceled, which exitCode would print as a bare
	// "interrupted".
	if pending == 0 {
		return fmt.Errorf("interrupted, after every migration was applied: the schema is at version %d", current)
	}
	return fmt.Errorf("interrupted at version %d, with %s pending (each migration is applied whole or not at all): "+
		"run 'fleetctl migrate up' again to apply the rest", current, plural(pending, "migration", "migrations"))
}

// upToDate says that nothing is pending at version current, and when a
// newer build migrated past this one's newest migration, that this build
// can neither apply nor roll back what it finds.
func upToDate(current int64) string {
	if current > coord.SchemaVersion {
		return fmt.Sprintf("schema is at version %d, newer than this fleetctl's newest migration (%d): nothing to apply; "+
			"roll back or reset with a fleetctl that has version %d", current, coord.SchemaVersion, current)
	}
	return fmt.Sprintf("schema is up to date at version %d", current)
}

// refuseNewer returns migrations.ErrSchemaNewer, naming the versions, when
// current is past this fleetctl's newest migration: what is to be
// rolled back (what: "roll back", "reset") is not in this build. It
// comes before the checks for live nodes, which could not make it
// possible.
func refuseNewer(current int64, what string) error {
	if current <= coord.SchemaVersion {
		return nil
	}
	return fmt.Errorf("%w: the database is at version %d, and this fleetctl's newest migration is %d: %s with a fleetctl that has version %d",
		migrations.ErrSchemaNewer, current, coord.SchemaVersion, what, current)
}

// migrationView is one migration as migrate status prints it. Its JSON form
// is a stable interface.
type migrationView struct {
	Version   int64      `json:"version"`
	Name      string     `json:"name"`
	State     string     `json:"state"`
	AppliedAt *time.Time `json:"applied_at"`
}

func newMigrationViews(st []*goose.MigrationStatus) []migrationView {
	out := make([]migrationView, len(st))
	for i, s := range st {
		v := migrationView{Version: s.Source.Version, State: "pending"}
		if s.Source.Path != "" {
			v.Name = path.Base(s.Source.Path)
		}
		if s.State == goose.StateApplied {
			v.State = "applied"
			at := s.AppliedAt.UTC()
			v.AppliedAt = &at
		}
		out[i] = v
	}
	return out
}

// noteMigrationLock says on stderr that the command is about to wait for
// the lock migrations take, when another session holds it exclusively: a
// migration or a rollback, which up, down and reset wait for (status only
// when a migration commits between its two looks, so it says nothing).
// (A shared holder, a status read, is brief, and only a command that has
// migrations to run waits for it.) It only looks; a failed look says
// nothing.
func (r *runner) noteMigrationLock(ctx context.Context, pool *pgxpool.Pool) {
	pid, exclusive, err := migrations.LockHolder(ctx, pool)
	if err != nil || pid == 0 || !exclusive {
		return
	}
	fmt.Fprintf(r.env.Stderr, "waiting for the migration lock, which another session (pid %d) holds: "+
		"a migration or a rollback running elsewhere (Ctrl-C stops waiting)\n", pid)
}
