package cli

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	ucli "github.com/urfave/cli/v2"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/migrations"
)

// DefaultDrainTimeout is how long drain --wait waits by default.
const DefaultDrainTimeout = 30 * time.Second

// drainPollInterval is how often drain --wait reads the node's row, and
// drainReadMin the least time it gives one read, whatever is left of
// --timeout.
const (
	drainPollInterval = 100 * time.Millisecond
	drainReadMin      = 5 * time.Second
)

func (r *runner) drainCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "drain",
		Usage:     "set NODE's share on KEY to 0 until undrain; --wait blocks until it holds no capacity",
		ArgsUsage: argsUsage("KEY", "NODE"),
		Description: `The node's grant drops to 0 at once; the requests it has in flight finish.
The drain belongs to the node id: it survives lease lapses, restarts and
new instances of NODE until undrain. With --wait, drain polls the node's
rows until none of them holds capacity any more — every instance has
acknowledged the 0 grant with nothing in flight, or its requests' bound has
passed — and fails with exit status 3 if that has not happened within
--timeout.`,
		Flags: []ucli.Flag{
			&ucli.BoolFlag{Name: "wait", Usage: "wait until no row of the node holds capacity (0 in flight, the 0 grant acknowledged)"},
			&ucli.DurationFlag{Name: "timeout", Value: DefaultDrainTimeout, Usage: "how long --wait waits"},
		},
		Action: r.action(func(c *ucli.Context) error {
			args, err := wantArgs(c, "KEY", "NODE")
			if err != nil {
				return err
			}
			timeout := c.Duration("timeout")
			if timeout <= 0 {
				return usageErrorf("invalid value %s for --timeout: want > 0", writtenDuration(timeout))
			}
			if c.IsSet("timeout") && !c.Bool("wait") {
				return usageErrorf("--timeout bounds --wait: give both, or neither")
			}
			key, nodeID := args[0], args[1]
			return r.withAdmin(c, func(ctx context.Context, admin coord.Admin) error {
				// Whether it was draining is read just before, as undrain
				// does: a drain of another operator's that lands in between
				// is reported as this one's.
				was, _, err := draining(ctx, admin, key, nodeID)
				if err != nil {
					return adminError(err, key, nodeID)
				}
				if err := admin.Drain(ctx, key, nodeID); err != nil {
					return adminError(err, key, nodeID)
				}
				if was {
					r.printf("node %q on key %q was already draining; nothing changed\n", nodeID, key)
				} else {
					r.printf("node %q on key %q is draining\n", nodeID, key)
				}
				if !c.Bool("wait") {
					return nil
				}
				return r.waitDrained(ctx, admin, key, nodeID, timeout)
			})
		}),
	}
}

// waitDrained polls key's rows until no row of nodeID holds capacity any
// more (see coord.NodeInfo.Reserve: acknowledged 0 with nothing in flight,
// or its hold has ended), or timeout passes (a failed check). A read that
// fails for a reason that may pass (see passing: the database restarting,
// a connection lost) is said on stderr and tried again; each read ends by
// the deadline, or drainReadMin after it began if that is later, and the
// coordinator's grace (on Postgres, at most 1 s; see coord.Postgres.Leave).
// The drain is in place whatever the wait's outcome, and every error says
// so.
func (r *runner) waitDrained(ctx context.Context, admin coord.Admin, key, nodeID string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	ticker := time.NewTicker(drainPollInterval)
	defer ticker.Stop()
	stays := fmt.Sprintf("node %q on key %q stays draining (%s to undo; %s to wait again)",
		nodeID, key, shellCommand("undrain", key, nodeID), shellCommand("drain --wait", key, nodeID))
	// Not context.Canceled, which exitCode would print as a bare "interrupted".
	interrupted := errors.New(stays + ": interrupted")
	lastReserve, lastInflight, lastFailure := -1, 0, ""
	timedOut := func() error {
		return checkFailedf("node %q on key %q still holds %d (%d in flight) after %s; it stays draining "+
			"(%s to undo)", nodeID, key, lastReserve, lastInflight, writtenDuration(timeout), shellCommand("undrain", key, nodeID))
	}
	for {
		rctx, cancel := context.WithDeadline(ctx, latest(deadline, time.Now().Add(drainReadMin)))
		nodes, err := admin.Nodes(rctx, key)
		cancel()
		switch {
		case err == nil:
			lastFailure = ""
		case ctx.Err() != nil:
			return interrupted
		case errors.Is(err, coord.ErrUnknownKey):
			return fmt.Errorf("key %q was deleted while the drain of node %q waited: the drain mark went with it, "+
				"and a node that joins makes the key again without one: %w", key, nodeID, adminError(err, key, nodeID))
		case !passing(err):
			return fmt.Errorf("%s: %w", stays, adminError(err, key, nodeID))
		case !time.Now().Before(deadline) && lastReserve >= 0:
			return timedOut() // counts from the last read that succeeded
		case !time.Now().Before(deadline):
			return checkFailedf("no read of node %q's rows on key %q succeeded within %s; it stays draining "+
				"(%s to undo): %w", nodeID, key, writtenDuration(timeout), shellCommand("undrain", key, nodeID), adminError(err, key, nodeID))
		default:
			if reason := strings.Join(strings.Fields(err.Error()), " "); reason != lastFailure {
				fmt.Fprintf(r.env.Stderr, "a read of node %q failed; trying again until the timeout: %s\n", nodeID, reason)
				lastFailure = reason
			}
			select {
			case <-ctx.Done():
				return interrupted
			case <-ticker.C:
			}
			continue
		}
		rows := rowsOf(nodes, nodeID)
		reserve, inflight, draining := 0, 0, false
		for _, n := range rows {
			reserve += n.Reserve
			inflight += n.Inflight
			draining = draining || n.Draining || n.Evicted
		}
		switch {
		case len(rows) > 0 && !draining:
			return fmt.Errorf("node %q on key %q was undrained while waiting", nodeID, key)
		case reserve == 0:
			r.printf("node %q on key %q is drained: it holds no capacity (the drain stays until undrain)\n", nodeID, key)
			return nil
		}
		if reserve != lastReserve {
			fmt.Fprintf(r.env.Stderr, "waiting for node %q: %d in flight, %d reserved\n", nodeID, inflight, reserve)
		}
		lastReserve, lastInflight = reserve, inflight
		if !time.Now().Before(deadline) {
			return timedOut()
		}
		select {
		case <-ctx.Done():
			return interrupted
		case <-ticker.C:
		}
	}
}

// latest returns the later of a and b.
func latest(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// rowsOf returns nodeID's rows among nodes.
func rowsOf(nodes []coord.NodeInfo, nodeID string) []coord.NodeInfo {
	var out []coord.NodeInfo
	for _, n := range nodes {
		if n.NodeID == nodeID {
			out = append(out, n)
		}
	}
	return out
}

func (r *runner) undrainCommand() *ucli.Command {
	return r.nodeOpCommand("undrain", "let NODE on KEY get a share again", "is no longer draining",
		func(ctx context.Context, a coord.Admin, key, nodeID string) (string, error) {
			// Whether it was draining is read just before: a drain that
			// lands between the read and the undrain is undone all the
			// same, and reported as not draining.
			draining, learningUntil, err := draining(ctx, a, key, nodeID)
			if err != nil {
				return "", err
			}
			if err := a.Undrain(ctx, key, nodeID); err != nil {
				return "", err
			}
			// Undrain clears a mark; it does not undo an eviction.
			nodes, err := a.Nodes(ctx, key)
			if err != nil {
				return "", err
			}
			rows := rowsOf(nodes, nodeID)
			evicted := len(rows) > 0
			for _, n := range rows {
				evicted = evicted && n.Evicted
			}
			said := "is no longer draining"
			if !draining {
				said = "was not draining"
			}
			switch {
			case evicted:
				return said + ", but it is evicted: its evicted instances never get a share " +
					"again; a new process with this node id joins at once", nil
			case !draining:
				return said + "; nothing changed", nil
			case !learningUntil.IsZero():
				return said + fmt.Sprintf(", but the key is in learning mode until %s: no node is granted more "+
					"than it holds, so a node that drained may get no share before then",
					learningUntil.UTC().Format(time.RFC3339)), nil
			}
			return said, nil
		})
}

// draining reports whether nodeID on key carries a drain mark now, and
// when the key's learning mode ends if it is in it (zero if not).
func draining(ctx context.Context, a coord.Admin, key, nodeID string) (bool, time.Time, error) {
	keys, err := a.Keys(ctx)
	if err != nil {
		return false, time.Time{}, err
	}
	for _, k := range keys {
		if k.Key != key {
			continue
		}
		var until time.Time
		if k.Learning {
			until = k.LearningUntil
		}
		return slices.Contains(k.Drains, nodeID), until, nil
	}
	return false, time.Time{}, nil
}

func (r *runner) evictCommand() *ucli.Command {
	cmd := r.nodeOpCommand("evict", "fence NODE on KEY: its next heartbeat stops it admitting", "is evicted",
		func(ctx context.Context, a coord.Admin, key, nodeID string) (string, error) {
			if said, err := nothingToEvict(ctx, a, key, nodeID); said != "" || err != nil {
				return said, err
			}
			return "", a.Evict(ctx, key, nodeID)
		})
	cmd.Description = `Every instance of the node id is evicted: its grant drops to 0 and its next
heartbeat fences it for good; it drains its requests and leaves. Its
capacity stays reserved until it has acknowledged and drained, or its
requests' bound has passed, never earlier. An evicted instance never gets a
share again, while a new process with the same node id can join at once:
eviction fences processes, it does not ban a node id. A node id whose rows
have all left (departed) or were evicted already has no instance to fence:
evict says so and changes nothing.`
	return cmd
}

// nothingToEvict says why evicting nodeID on key would fence no instance —
// every row of it left (departed: the instance admits nothing more) or
// was evicted already — or returns "" when one may still admit (or the
// key has no row of nodeID, which Evict reports). The look and the
// eviction are two steps: an instance that joins after the look is not
// fenced, as it would not be had it joined just after an eviction
// (eviction fences instances, it does not ban a node id).
func nothingToEvict(ctx context.Context, a coord.Admin, key, nodeID string) (string, error) {
	rows, err := a.Nodes(ctx, key)
	if err != nil {
		return "", err
	}
	var mine, evicted, departed int
	for _, n := range rows {
		if n.NodeID != nodeID {
			continue
		}
		mine++
		switch {
		case n.Evicted:
			evicted++
		case n.Departed:
			departed++
		default:
			return "", nil
		}
	}
	const held = "hold what they had in flight until their HOLD ends"
	switch {
	case mine == 0:
		return "", nil
	case evicted == mine:
		return "was already evicted; nothing changed", nil
	case departed == mine:
		return "has left (its rows are departed: their instances admit nothing more, and " + held +
			"); nothing to evict, nothing changed", nil
	default:
		return "has no instance to fence (its rows left or were evicted already, and " + held +
			"); nothing changed", nil
	}
}

// nodeOpCommand builds a command that applies op to one node and reports
// it done, or what op says instead.
func (r *runner) nodeOpCommand(name, usage, done string,
	op func(context.Context, coord.Admin, string, string) (string, error)) *ucli.Command {
	return &ucli.Command{
		Name:      name,
		Usage:     usage,
		ArgsUsage: argsUsage("KEY", "NODE"),
		Action: r.action(func(c *ucli.Context) error {
			args, err := wantArgs(c, "KEY", "NODE")
			if err != nil {
				return err
			}
			key, nodeID := args[0], args[1]
			return r.withAdmin(c, func(ctx context.Context, admin coord.Admin) error {
				said, err := op(ctx, admin, key, nodeID)
				if err != nil {
					return adminError(err, key, nodeID)
				}
				if said == "" {
					said = done
				}
				r.printf("node %q on key %q %s\n", nodeID, key, said)
				return nil
			})
		}),
	}
}

func (r *runner) limitsCommand() *ucli.Command {
	return &ucli.Command{
		Name:   "limits",
		Usage:  "show or set KEY's operator override of L_global and its rates",
		Action: r.unknownCommand,
		Subcommands: []*ucli.Command{
			{
				Name:      "get",
				Usage:     "show KEY's min/max override, L_global, aggregate and rates",
				ArgsUsage: argsUsage("KEY"),
				Description: `A "-" bound or rate is unset. RPM and TPM are the key's request and token
rates per minute as its newest heartbeat computed them, followed by the
operator's in parentheses when one is set. JSON fields: key, min_limit,
max_limit (null when unset), l_global, aggregate, rpm_limit, tpm_limit
(the operator's rates), rpm, tpm (the key's; null for none).`,
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
					return r.withAdmin(c, func(ctx context.Context, admin coord.Admin) error {
						k, err := findKey(ctx, admin, args[0])
						if err != nil {
							return err
						}
						if format == formatJSON {
							return writeJSON(r.env.Stdout, newLimitsView(k))
						}
						return writeLimitsTable(r.env.Stdout, newLimitsView(k))
					})
				}),
			},
			r.limitsSetCommand(),
		},
	}
}

func (r *runner) limitsSetCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "set",
		Usage:     "change KEY's min/max override of L_global and its rates per minute",
		ArgsUsage: argsUsage("KEY"),
		Description: fmt.Sprintf(`L_global is clamped to [min, max] from the key's next heartbeat on.
Only the bounds named change: --min N and --max N set a bound (N in
1..%d), --clear-min and --clear-max remove one; the other bound keeps
its value. A value out of range, or --max below --min, is a usage error
(exit status 2); a bound that crosses the key's other, unchanged bound is
refused by the coordinator (exit status 1). The change is one statement:
two limits set on one key at the same moment, one on --min and one on
--max, both stay.

--rpm N and --tpm N set the key's request and token rates per minute
(N in 0..%d; 0 removes the rate): the key's rate when its
nodes learn none, and a cap on what they learn, from the key's next
heartbeat on. The rate not named keeps its value.

--aggregate sets how the key folds its nodes' estimates (l_local) into
L_global: lower_median (the default: the ⌈m/2⌉-th smallest of m, so one
wild estimate cannot move the fleet) or min (the most cautious node
rules), from the key's next heartbeat on.

Every flag is checked before anything is written: a bad value in any of
them changes nothing. The bounds, the aggregate and the rates are
written in that order, one statement each; should one fail, the error
says which were made.

Prints the key's limits and rates after the change.`, coord.MaxCount, coord.MaxRate),
		Flags: []ucli.Flag{
			decimalFlag("min", "lower bound of L_global, "+countRange, "unchanged", countRange),
			decimalFlag("max", "upper bound of L_global, "+countRange, "unchanged", countRange),
			&ucli.BoolFlag{Name: "clear-min", Usage: "remove the lower bound"},
			&ucli.BoolFlag{Name: "clear-max", Usage: "remove the upper bound"},
			rpmFlag("unchanged"),
			tpmFlag("unchanged"),
			&ucli.StringFlag{Name: "aggregate", Usage: "how l_local values fold into L_global: lower_median or min (any case)", DefaultText: "unchanged"},
		},
		Action: r.action(func(c *ucli.Context) error {
			args, err := wantArgs(c, "KEY")
			if err != nil {
				return err
			}
			minChange, err := readBoundChange(c, "min")
			if err != nil {
				return err
			}
			maxChange, err := readBoundChange(c, "max")
			if err != nil {
				return err
			}
			rates, err := readRatesChange(c)
			if err != nil {
				return err
			}
			setRates := rates.SetRequests || rates.SetTokens
			aggregate := coord.Aggregate(strings.ToLower(c.String("aggregate"))) // as --output and KIND, any case
			setAggregate := c.IsSet("aggregate")
			if setAggregate && aggregate != coord.AggregateLowerMedian && aggregate != coord.AggregateMin {
				return usageErrorf("invalid value %q for --aggregate: want %s or %s", c.String("aggregate"), coord.AggregateLowerMedian, coord.AggregateMin)
			}
			if !minChange.set && !maxChange.set && !setRates && !setAggregate {
				return usageErrorf("nothing to set: give --min, --max, --clear-min, --clear-max, --rpm, --tpm or --aggregate")
			}
			if minChange.value != nil && maxChange.value != nil && *maxChange.value < *minChange.value {
				return usageErrorf("--max %d is below --min %d", *maxChange.value, *minChange.value)
			}
			key := args[0]
			unknownKey := func() error {
				if coord.Padded(key) {
					return unknownKeyError(key) // no key can have the name: keys create refuses it
				}
				return fmt.Errorf("unknown key %q (to cap a key before any node joins: %s)",
					key, shellCommand("keys create --max N", key))
			}
			return r.withAdmin(c, func(ctx context.Context, admin coord.Admin) error {
				// The limits first: the coordinator may refuse a bound
				// that crosses the unchanged one, and then nothing is
				// written. The aggregate and the rates are checked above
				// and cannot be refused.
				var made []string
				failed := func(what string, err error) error {
					if errors.Is(err, coord.ErrUnknownKey) && len(made) == 0 {
						return unknownKey()
					}
					err = adminError(err, key, "")
					if len(made) > 0 {
						return fmt.Errorf("the %s changed, but the %s did not: %w", strings.Join(made, " and the "), what, err)
					}
					return err
				}
				// A bound cleared may have held L_GLOBAL: read it first.
				var before *coord.KeyInfo
				if maxChange.set && maxChange.value == nil || minChange.set && minChange.value == nil {
					if k, err := findKey(ctx, admin, key); err == nil {
						before = &k
					}
				}
				var minLimit, maxLimit *int
				if minChange.set || maxChange.set {
					var err error
					minLimit, maxLimit, err = admin.UpdateLimits(ctx, key, coord.LimitsChange{
						SetMin: minChange.set, Min: minChange.value, SetMax: maxChange.set, Max: maxChange.value})
					if err != nil {
						return failed("min/max", crossedStored(err, minChange.set, maxChange.set))
					}
					made = append(made, "min/max")
				}
				if setAggregate {
					if err := admin.SetAggregate(ctx, key, aggregate); err != nil {
						return failed("aggregate", err)
					}
					made = append(made, "aggregate")
				}
				var rateLimit coord.Rates
				if setRates {
					var err error
					rateLimit, err = admin.SetRates(ctx, key, rates)
					if err != nil {
						return failed("rates", err)
					}
				}
				limitsChanged := minChange.set || maxChange.set
				k, err := findKey(ctx, admin, key)
				if err != nil {
					return fmt.Errorf("key %q was changed, but reading it back failed: %w", key, err)
				}
				if limitsChanged {
					k.MinLimit, k.MaxLimit = minLimit, maxLimit
				}
				if setRates {
					k.RateLimit = rateLimit
				}
				if err := writeLimitsTable(r.env.Stdout, newLimitsView(k)); err != nil {
					return err
				}
				switch {
				case k.LGlobal <= 0:
				case maxLimit != nil && k.LGlobal > *maxLimit || minLimit != nil && k.LGlobal < *minLimit:
					r.printf("L_GLOBAL moves within the new bounds at the key's next heartbeat\n")
				case before != nil && (maxChange.set && maxLimit == nil && before.MaxLimit != nil && *before.MaxLimit == k.LGlobal ||
					minChange.set && minLimit == nil && before.MinLimit != nil && *before.MinLimit == k.LGlobal):
					// L_GLOBAL shown is the bound just cleared.
					r.printf("L_GLOBAL follows the nodes' estimates without the cleared bound from the key's next heartbeat\n")
				}
				return nil
			})
		}),
	}
}

// boundChange is what limits set does to one bound.
type boundChange struct {
	set   bool // the bound changes
	value *int // the new bound; nil removes it
}

// readBoundChange reads --NAME and --clear-NAME.
func readBoundChange(c *ucli.Context, name string) (boundChange, error) {
	clearFlag := "clear-" + name
	switch {
	case c.IsSet(name) && c.Bool(clearFlag):
		return boundChange{}, usageErrorf("--%s and --%s contradict each other", name, clearFlag)
	case c.Bool(clearFlag):
		return boundChange{set: true}, nil
	case c.IsSet(name):
		v := decimalValue(c, name)
		if v < 1 || v > coord.MaxCount {
			return boundChange{}, usageErrorf("invalid value %d for --%s: want 1..%d (use --%s to remove the bound)", v, name, coord.MaxCount, clearFlag)
		}
		n := int(v)
		return boundChange{set: true, value: &n}, nil
	}
	return boundChange{}, nil
}

// rpmFlag and tpmFlag set a key's operator rates per minute.
func rpmFlag(defaultText string) ucli.Flag {
	return decimalFlag("rpm", "requests per minute of the key, "+rateRange+" (0 removes the rate)", defaultText, rateRange)
}

func tpmFlag(defaultText string) ucli.Flag {
	return decimalFlag("tpm", "tokens per minute of the key, "+rateRange+" (0 removes the rate)", defaultText, rateRange)
}

// rateRange is what --rpm and --tpm accept.
var rateRange = fmt.Sprintf("0..%d", coord.MaxRate)

// decimal is a flag's value written in decimal digits only: a limit typed
// as 0600 is 600, not the octal 384 that Go's integer flags read, and 0x600
// or 6_00 are refused.
//
// want is the range the command accepts, for the error of a value too
// large for an int64, which never reaches the command's own check.
type decimal struct {
	v    int64
	want string
}

func (d *decimal) Set(s string) error {
	v, err := strconv.ParseInt(s, 10, 64)
	switch {
	case errors.Is(err, strconv.ErrRange):
		return errors.New("out of range: want " + d.want)
	case err != nil:
		return errors.New("want a decimal integer")
	}
	d.v = v
	return nil
}

func (d *decimal) String() string { return strconv.FormatInt(d.v, 10) }

// decimalFlag is an integer flag written in decimal, whose command accepts
// the range want; read it with decimalValue.
func decimalFlag(name, usage, defaultText, want string) ucli.Flag {
	return &ucli.GenericFlag{Name: name, Usage: usage, DefaultText: defaultText, Value: &decimal{want: want}}
}

// decimalFlagDefault is decimalFlag with a default value, which help shows.
func decimalFlagDefault(name, usage string, def int64, want string) ucli.Flag {
	return &ucli.GenericFlag{Name: name, Usage: usage, Value: &decimal{v: def, want: want}}
}

// countRange is what the limit bounds accept.
var countRange = fmt.Sprintf("1..%d", coord.MaxCount)

// decimalValue is the value of the decimalFlag name, 0 (or its default)
// when not set.
func decimalValue(c *ucli.Context, name string) int64 {
	if d, ok := c.Generic(name).(*decimal); ok {
		return d.v
	}
	return 0
}

// readRatesChange reads --rpm and --tpm; a value outside 0..coord.MaxRate
// is a usage error naming the flag and the value.
func readRatesChange(c *ucli.Context) (coord.RatesChange, error) {
	var rc coord.RatesChange
	for _, f := range []struct {
		name string
		set  *bool
		v    *int64
	}{{"rpm", &rc.SetRequests, &rc.Requests}, {"tpm", &rc.SetTokens, &rc.Tokens}} {
		if !c.IsSet(f.name) {
			continue
		}
		v := decimalValue(c, f.name)
		if v < 0 || v > coord.MaxRate {
			return coord.RatesChange{}, usageErrorf("invalid value %d for --%s: want 0..%d (0 removes the rate)",
				v, f.name, coord.MaxRate)
		}
		*f.set, *f.v = true, v
	}
	return rc, nil
}

func (r *runner) relearnCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "relearn",
		Usage:     "put KEY in learning mode now, after restoring its tables in a way the database cannot show",
		ArgsUsage: argsUsage("KEY"),
		Description: `The coordinator enters learning mode by itself when the database's
incarnation changes (a failover, a point-in-time restore, a server restart,
the tables recreated). A restore it cannot see — rows rewritten in place, a
data-only restore into the running database — must be followed by relearn:
until every lease and request of before the restore has run out, no node is
granted more than it proves it holds.`,
		Action: r.action(func(c *ucli.Context) error {
			args, err := wantArgs(c, "KEY")
			if err != nil {
				return err
			}
			key := args[0]
			return r.withAdmin(c, func(ctx context.Context, admin coord.Admin) error {
				until, err := admin.Relearn(ctx, key)
				if err != nil {
					return adminError(err, key, "")
				}
				// Whether learning is still on is the database's call: its
				// clock set until.
				k, err := findKey(ctx, admin, key)
				if err != nil {
					return fmt.Errorf("key %q was put in learning mode, but reading it back failed: %w", key, err)
				}
				if !k.Learning && k.Unchecked {
					r.printf("key %q: no node holds a lease or a request on it, so learning mode ended at once; the key stays "+
						"unchecked (the database changed since its last heartbeat): its next heartbeat starts learning mode "+
						"again, and 'fleetctl keys delete' refuses it until then (--force deletes it if no node of the key runs)\n", key)
					return nil
				}
				if !k.Learning {
					r.printf("key %q: no node holds a lease or a request on it, so learning mode ended at once\n", key)
					return nil
				}
				r.printf("key %q is in learning mode until %s: no node is granted more than it holds\n",
					key, until.UTC().Format(time.RFC3339))
				return nil
			})
		}),
	}
}

func (r *runner) grantCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "grant",
		Usage:     "give ROLE what a fleet node (KIND node) or an operator (KIND operator) needs",
		ArgsUsage: argsUsage("KIND", "ROLE"),
		Description: `Run it as the schema's owner, after 'fleetctl migrate up'. A node role may
heartbeat and leave; an operator role may read the tables (and which keys
a loss left unchecked) and drain, undrain, evict, relearn, set limits,
rates and the aggregate, create and delete keys. Neither may write the
tables or pass the coordinator a clock. The role must exist (CREATE ROLE
... LOGIN); public, which Postgres reads as every role, is refused, and so
is a name longer than the server keeps whole (max_identifier_length, 63
bytes by default), which Postgres would cut to another role's.

An operator may also read the version table (fleetlimit_schema_version)
where it is: the one on this connection's search path, or every one when
none is on it. It gets USAGE on that table's schema if it lacks it, so that
it reads 'fleetctl migrate status' with a search path that starts with the
table's schema (options=-csearch_path=SCHEMA in the connection string).
That USAGE is on the whole schema: the operator may then also run every
function there that PUBLIC may run (by default, all of them) and use its
types; its tables stay closed unless granted. Nothing is granted beyond
fleetlimit's when the version table is in public (every role may use it by
default) or in a schema of its own.`,
		Action: r.action(func(c *ucli.Context) error {
			args, err := wantArgs(c, "KIND", "ROLE")
			if err != nil {
				return err
			}
			kind, role := strings.ToLower(args[0]), args[1]
			if kind != "node" && kind != "operator" {
				return usageErrorf("invalid KIND %q: want node or operator", args[0])
			}
			pool, err := r.openPool(c)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := migrations.Grant(c.Context, pool, role, kind); err != nil {
				return roleHint(err, role, "grant")
			}
			r.printf("role %q has a fleet %s's rights\n", role, kind)
			return nil
		}),
	}
}

func (r *runner) revokeCommand() *ucli.Command {
	return &ucli.Command{
		Name:      "revoke",
		Usage:     "take from ROLE every right 'fleetctl grant' gives, node's and operator's",
		ArgsUsage: argsUsage("ROLE"),
		Description: `Run it as the schema's owner. It revokes everything on the fleetlimit
schema, its tables and its functions, and SELECT on the version table
where grant would grant it; USAGE that grant gave on the version table's
schema stays, since the role may have had it before. The role itself
stays. Nodes that connect as ROLE fail at their next heartbeat and fail
closed when their leases run out: stop or drain them first. The schema's
owner, public and a name longer than max_identifier_length are refused.`,
		Action: r.action(func(c *ucli.Context) error {
			args, err := wantArgs(c, "ROLE")
			if err != nil {
				return err
			}
			pool, err := r.openPool(c)
			if err != nil {
				return err
			}
			defer pool.Close()
			if err := migrations.Revoke(c.Context, pool, args[0]); err != nil {
				return roleHint(err, args[0], "revoke")
			}
			r.printf("role %q has no fleetlimit rights\n", args[0])
			return nil
		}),
	}
}

// roleHint adds to an error of grant or revoke (the command named) what
// to do: create the missing role (for grant; revoke says there was
// nothing to take), or run as the schema's owner.
func roleHint(err error, role, command string) error {
	switch code := sqlState(err); {
	case code == "42704" && command == "revoke": // undefined object
		return fmt.Errorf("%w: a role that does not exist holds no rights; nothing changed", err)
	case code == "42704":
		return fmt.Errorf("%w (create the role first: CREATE ROLE %s LOGIN)", err, pgx.Identifier{role}.Sanitize())
	case code == sqlInsufficientPrivilege:
		return fmt.Errorf("%w (%s is the schema owner's to run: the role that ran 'fleetctl migrate up')", err, command)
	}
	return schemaHint(err)
}

// crossedStored names the stored bound in the coordinator's refusal of a
// min or max that crosses it, when only the other one was given.
func crossedStored(err error, setMin, setMax bool) error {
	switch {
	case !errors.Is(err, coord.ErrInvalidOverride) || setMin == setMax:
		return err
	case setMin:
		return fmt.Errorf("%w (the max is the one the key has: give --max too, or --clear-max)", err)
	default:
		return fmt.Errorf("%w (the min is the one the key has: give --min too, or --clear-min)", err)
	}
}
