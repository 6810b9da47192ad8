package cli

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	ucli "github.com/urfave/cli/v2"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/internal/quote"
)

// withAdmin connects, runs fn with the coordinator's operator interface and
// closes the pool.
func (r *runner) withAdmin(c *ucli.Context, fn func(ctx context.Context, admin coord.Admin) error) error {
	return r.withPoolAdmin(c, func(ctx context.Context, _ *pgxpool.Pool, admin *coord.Postgres) error { return fn(ctx, admin) })
}

// withPoolAdmin is withAdmin for a command that also reads the pool (its
// configuration) or checks the schema's version.
func (r *runner) withPoolAdmin(c *ucli.Context, fn func(ctx context.Context, pool *pgxpool.Pool, admin *coord.Postgres) error) error {
	pool, err := r.openPool(c)
	if err != nil {
		return err
	}
	defer pool.Close()
	admin, err := coord.NewPostgres(pool)
	if err != nil {
		return err
	}
	return fn(c.Context, pool, admin)
}

// adminError turns the coordinator's sentinel errors into messages for an
// operator: `unknown key "x"`, `unknown node "n" on key "x"`, the reason of
// an invalid override, or a hint when the schema is missing or the role
// lacks an operator's rights.
func adminError(err error, key, nodeID string) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, coord.ErrUnknownNode):
		return fmt.Errorf("unknown node %q on key %q%s", nodeID, key, paddedNote(nodeID, "node id"))
	case errors.Is(err, coord.ErrUnknownKey):
		return unknownKeyError(key)
	case errors.Is(err, coord.ErrInvalidOverride):
		msg := err.Error()
		if i := strings.Index(msg, coord.ErrInvalidOverride.Error()); i > 0 {
			msg = msg[i:]
		}
		return errors.New(msg)
	}
	if sqlState(err) == sqlInsufficientPrivilege {
		return fmt.Errorf("%w (an operator's role needs 'fleetctl grant operator ROLE', run by the schema owner)", err)
	}
	return schemaHint(err)
}

// schemaHint adds a hint to errors that mean the fleetlimit schema is
// missing or outdated.
func schemaHint(err error) error {
	switch sqlState(err) {
	case "42P01", "3F000", "42883": // undefined table, schema, function
		return fmt.Errorf("%w (is the schema migrated? run 'fleetctl migrate up')", err)
	}
	return err
}

// sqlInsufficientPrivilege is the SQLSTATE of a statement the role lacked
// a privilege for.
const sqlInsufficientPrivilege = "42501"

// sqlState is the SQLSTATE of the database error err wraps, "" if none.
func sqlState(err error) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Code
	}
	return ""
}

// findKey returns the key called key.
func findKey(ctx context.Context, admin coord.Admin, key string) (coord.KeyInfo, error) {
	keys, err := admin.Keys(ctx)
	if err != nil {
		return coord.KeyInfo{}, adminError(err, key, "")
	}
	for _, k := range keys {
		if k.Key == key {
			return k, nil
		}
	}
	return coord.KeyInfo{}, unknownKeyError(key)
}

// unknownKeyError says key has no row; it wraps coord.ErrUnknownKey
// without repeating its text.
func unknownKeyError(key string) error {
	return &wrapped{msg: fmt.Sprintf("unknown key %q%s", key, paddedNote(key, "key")), err: coord.ErrUnknownKey}
}

// paddedNote says why no key or node can have the name s, when s begins or
// ends with white space or a byte order mark (see coord.Padded): empty
// otherwise.
func paddedNote(s, what string) string {
	if !coord.Padded(s) {
		return ""
	}
	return " (it begins or ends with white space or a byte order mark, which fleet.New refuses in a " + what + ")"
}

// wrapped is an error with its own message that wraps err.
type wrapped struct {
	msg string
	err error
}

func (w *wrapped) Error() string { return w.msg }
func (w *wrapped) Unwrap() error { return w.err }

func (r *runner) keysCommand() *ucli.Command {
	return &ucli.Command{
		Name:  "keys",
		Usage: "list every key: L_global, override, live nodes, Σ share, Σ in-flight, utilization, rates",
		Description: `Utilization is Σ in-flight / L_global over the live members. HELD is the
slots still reserved for instances that are no members (expired,
departed, evicted); MODE is learning after the database lost state, and
unchecked for a key not checked since a loss the database can show (a
failover, a restore, a server restart): its next heartbeat starts
learning mode, and 'keys delete' refuses it until then. A server in
recovery, a schema before version 14 and a role given read rights by
hand (no EXECUTE on fleetlimit.unchecked_keys) cannot tell: their keys
read as normal then.

When a key has a rate, RPM and TPM show its request and token rates per
minute as the newest heartbeat computed them, with the operator's in
parentheses when one is set ("540 (max 600)"), RATE_SHARE the members'
rate shares added up, and RATE_USED what they sent in the minute before
their last heartbeats, as requests/tokens per minute; "-" is none. The
rate columns appear, for every key, once a key has a rate or a member
with a rate share.
JSON fields: key, l_global, min_limit, max_limit, aggregate, epoch,
generation, created_at, live_nodes, sum_share, sum_inflight, utilization,
held_rows, held_reserve, learning_until, unchecked, drains, rpm, tpm,
rpm_limit, tpm_limit, sum_rpm_share, sum_tpm_share, sum_rpm_used,
sum_tpm_used.

'keys create KEY [--min N] [--max N] [--rpm N] [--tpm N]' creates a key, so
that a quota can be capped before any node joins; 'keys delete KEY' deletes
one with all its rows, and refuses while nodes are live on it unless
--force: their next heartbeats would re-create it without its min/max
and rates, in learning mode.`,
		Flags:       []ucli.Flag{outputFlag()},
		Subcommands: []*ucli.Command{r.keysCreateCommand(), r.keysDeleteCommand()},
		Action: r.action(func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			if _, err := wantArgs(c); err != nil {
				return err
			}
			return r.withAdmin(c, func(ctx context.Context, admin coord.Admin) error {
				keys, err := admin.Keys(ctx)
				if err != nil {
					return adminError(err, "", "")
				}
				views := make([]keyView, len(keys))
				for i, k := range keys {
					views[i] = newKeyView(k)
				}
				if format == formatJSON {
					return writeJSON(r.env.Stdout, views)
				}
				return writeKeysTable(r.env.Stdout, views)
			})
		}),
	}
}

func (r *runner) keysCreateCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "create",
		Usage:     "create KEY with an optional min/max override and rates, before any node joins",
		ArgsUsage: argsUsage("KEY"),
		Description: `--min and --max bound L_global; --rpm and --tpm give the key request and
token rates per minute (see 'fleetctl limits set --help'). Every flag is
checked before the key is created, and the key is written with its rates
in one transaction: when the command fails, no key was created.`,
		Flags: []ucli.Flag{
			decimalFlag("min", "lower bound of L_global, "+countRange, "none", countRange),
			decimalFlag("max", "upper bound of L_global, "+countRange, "none", countRange),
			rpmFlag("none"),
			tpmFlag("none"),
		},
		Action: r.action(func(c *ucli.Context) error {
			args, err := wantArgs(c, "KEY")
			if err != nil {
				return err
			}
			if coord.Padded(args[0]) {
				return usageErrorf("invalid KEY %s: it begins or ends with white space or a byte order mark, and nodes configured without it would "+
					"share another quota (fleet.New refuses such a key)", quote.Short(args[0]))
			}
			var bounds [2]*int
			for i, name := range []string{"min", "max"} {
				if !c.IsSet(name) {
					continue
				}
				v := decimalValue(c, name)
				if v < 1 || v > coord.MaxCount {
					return usageErrorf("invalid value %d for --%s: want 1..%d", v, name, coord.MaxCount)
				}
				n := int(v)
				bounds[i] = &n
			}
			if bounds[0] != nil && bounds[1] != nil && *bounds[1] < *bounds[0] {
				return usageErrorf("--max %d is below --min %d", *bounds[1], *bounds[0])
			}
			rates, err := readRatesChange(c)
			if err != nil {
				return err
			}
			key := args[0]
			// A rate left unset is none: the key is new.
			set := coord.Rates{Requests: rates.Requests, Tokens: rates.Tokens}
			return r.withAdmin(c, func(ctx context.Context, admin coord.Admin) error {
				if err := admin.CreateKey(ctx, key, bounds[0], bounds[1], coord.WithRates(set)); err != nil {
					if errors.Is(err, coord.ErrKeyExists) {
						return fmt.Errorf("key %q exists (change its limits with 'fleetctl limits set')", key)
					}
					return adminError(err, key, "")
				}
				if !rates.SetRequests && !rates.SetTokens {
					r.printf("key %q created (min %s, max %s)\n", key, optInt(bounds[0]), optInt(bounds[1]))
					return nil
				}
				r.printf("key %q created (min %s, max %s, rpm %s, tpm %s)\n", key, optInt(bounds[0]), optInt(bounds[1]),
					optInt64(optRate(set.Requests)), optInt64(optRate(set.Tokens)))
				return nil
			})
		}),
	}
}

func (r *runner) keysDeleteCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "delete",
		Usage:     "delete KEY and all its rows: nodes, drain marks, evictions",
		ArgsUsage: argsUsage("KEY"),
		Description: `Refused while nodes are live on the key (their next heartbeats would
re-create it, without its min/max and rates), and while rows of nodes
that expired, left or were evicted still hold capacity for requests that
may still run (slots, HELD in 'fleetctl keys', and an evicted node's
rate share while its lease runs; the rows are in 'fleetctl nodes KEY'):
a key deleted then, and
re-created by the next node that joins, would grant that capacity again
beside those requests. Refused too while the key's rows may not show
what its nodes hold: after the database changed (a failover, a restore,
a server restart) until a heartbeat has seen the change, and while the
key is in learning mode (MODE in 'fleetctl keys'). --force deletes it
anyway.`,
		Flags: []ucli.Flag{&ucli.BoolFlag{Name: "force", Usage: "delete even while nodes are live on the key, capacity is held on it or its rows may be stale"}},
		Action: r.action(func(c *ucli.Context) error {
			args, err := wantArgs(c, "KEY")
			if err != nil {
				return err
			}
			key := args[0]
			return r.withPoolAdmin(c, func(ctx context.Context, _ *pgxpool.Pool, admin *coord.Postgres) error {
				// The refusal while capacity is held is schema 10's, the
				// one after a loss schema 12's: an older schema's
				// delete_key throws that capacity, or those limits, away.
				if err := admin.CheckSchema(ctx); err != nil {
					return adminError(err, key, "")
				}
				if err := admin.DeleteKey(ctx, key, c.Bool("force")); err != nil {
					switch {
					case errors.Is(err, coord.ErrLiveNodes):
						return fmt.Errorf("nodes are live on key %q: their next heartbeats would re-create it without "+
							"its min/max and rates, in learning mode; stop them first, or give --force", key)
					case errors.Is(err, coord.ErrLearning):
						_, detail, _ := strings.Cut(err.Error(), coord.ErrLearning.Error()+": ")
						return fmt.Errorf("key %q may have nodes its rows do not show (%s): the database may have lost its "+
							"last heartbeats (a failover, a restore, a server restart), and a node still running under a "+
							"forgotten grant would re-create the key without its min/max and rates; wait until learning mode "+
							"ends (it starts at the key's next heartbeat; 'fleetctl keys' shows MODE), or, if no node of the "+
							"key runs, give --force", key, detail)
					case errors.Is(err, coord.ErrHeldCapacity):
						_, detail, _ := strings.Cut(err.Error(), coord.ErrHeldCapacity.Error()+": ")
						return fmt.Errorf("key %q holds capacity for requests that may still run (%s; the rows are in %s): "+
							"a node that joins after the delete would be granted it again beside them; "+
							"wait for the hold to end, or give --force", key, detail, shellCommand("nodes", key))
					}
					return adminError(err, key, "")
				}
				r.printf("key %q deleted\n", key)
				return nil
			})
		}),
	}
}

func (r *runner) nodesCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "nodes",
		Usage:     "list the node rows of KEY",
		ArgsUsage: argsUsage("KEY"),
		Description: `Every row of the key, expired ones not yet deleted included. GEN is
granted/applied generation; FENCED is yes once the lease has run out.
When a row has a rate, RATE_SHARE (granted), RATE_USED (what the node
sent in the minute before its last heartbeat; tokens as estimated,
corrected when settled), RATE_DEMAND and RATE_LOCAL (the node's own
estimate of the key's rate) show requests/tokens per minute; "-" is none.
JSON fields: key, node_id, instance, seq, l_local, share, inflight, demand,
reserve, epoch, granted_gen, applied_gen, unacked_high, lease_remaining_ms,
hold_remaining_ms, heartbeat_age_ms, lease_expires_at, hold_until,
heartbeat_at, joined_at, status, draining, evicted, departed, fenced,
labels, rpm_share, tpm_share, rpm_used, tpm_used, rpm_demand, tpm_demand, rpm_local, tpm_local,
rpm_reserve, tpm_reserve, rpm_high, tpm_high.`,
		Flags: []ucli.Flag{outputFlag()},
		Action: r.action(func(c *ucli.Context) error {
			format, err := outputFormat(c)
			if err != nil {
				return err
			}
			args, err := wantArgs(c, "KEY")
			if err != nil {
				return err
			}
			key := args[0]
			return r.withAdmin(c, func(ctx context.Context, admin coord.Admin) error {
				nodes, err := admin.Nodes(ctx, key)
				if err != nil {
					return adminError(err, key, "")
				}
				// The key's rates tell a share of 0 (send nothing)
				// from no pacing.
				k, err := findKey(ctx, admin, key)
				if err != nil {
					return err
				}
				views := newNodeViews(newKeyView(k), nodes)
				if format == formatJSON {
					return writeJSON(r.env.Stdout, views)
				}
				return writeNodesTable(r.env.Stdout, views)
			})
		}),
	}
}
