package fleet

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/internal/quote"
)

// OutagePolicy says what a node does when it cannot renew its lease.
type OutagePolicy int

const (
	// FailClosed keeps the last share until the fence deadline, then admits
	// nothing until a heartbeat succeeds. The fleet never exceeds its global
	// limit. It is the default.
	FailClosed OutagePolicy = iota
	// HoldLastShare keeps admitting at the last share however long the
	// coordinator is unreachable. It trades the hard bound for availability:
	// once the database evicts the node, its share may be granted to others
	// while it still uses it — its rate share as soon as its lease ends
	// (docs/design.md §17). An evicted node is fenced under either policy.
	HoldLastShare
)

// String returns the policy's name.
func (p OutagePolicy) String() string {
	switch p {
	case FailClosed:
		return "fail-closed"
	case HoldLastShare:
		return "hold-last-share"
	default:
		return fmt.Sprintf("OutagePolicy(%d)", int(p))
	}
}

// DefaultMaxRequestDuration is Config.MaxRequestDuration's default.
const DefaultMaxRequestDuration = 5 * time.Minute

// MaxRequestDurationLimit is the largest Config.MaxRequestDuration: its
// 0.1% padding must stay within coord.MaxRequestBound.
const MaxRequestDurationLimit = 23 * time.Hour

// Config configures a Node. Zero values mean the defaults stated on each
// field; New rejects out-of-range values with an error naming the field.
type Config struct {
	// Key names the shared quota, e.g. "openai:gpt-4o". Required; at most
	// coord.MaxNameBytes bytes of UTF-8, not beginning or ending with white
	// space or a byte order mark (coord.Padded): nodes whose keys differ by
	// a byte share two quotas, not one.
	Key string
	// NodeID names this node within the key, stable across restarts (a pod
	// name). Two live processes must not share one. At most
	// coord.MaxNameBytes bytes of UTF-8, not beginning or ending with white
	// space or a byte order mark. Defaults to "<hostname>-<pid>".
	NodeID string
	// Labels are shown to operators by fleetctl: at most coord.MaxLabels,
	// names of 1..coord.MaxNameBytes bytes and values of at most
	// coord.MaxNameBytes, all UTF-8 without NUL (New checks them, and keeps
	// a copy: later changes to the map do not reach the node).
	Labels map[string]string

	// HeartbeatInterval is the time between periodic heartbeats. Defaults to
	// 1s. Must be in [10ms, 10m].
	HeartbeatInterval time.Duration
	// LeaseTTL is how long the coordinator keeps the node alive without a
	// heartbeat. Defaults to 2×HeartbeatInterval, at least
	// coord.MinLeaseTTL. Must exceed HeartbeatInterval and lie in
	// [coord.MinLeaseTTL, coord.MaxLeaseTTL].
	LeaseTTL time.Duration
	// FenceMargin is subtracted from every lease: the node stops admitting
	// this long before the database could expire it. It must cover the
	// drift between the node's and the database's clock rates over a lease
	// (see package fence; the drift over MaxRequestDuration is covered by
	// the 0.1% the node adds to it). Defaults to LeaseTTL/4, or half of
	// LeaseTTL−HeartbeatInterval if that is less, which must then be at
	// least 1ms (New refuses a LeaseTTL within 2ms of HeartbeatInterval
	// unless FenceMargin is set). Must be in [0, LeaseTTL−HeartbeatInterval);
	// 0 means the default, so the least margin one can set is 1ns.
	FenceMargin time.Duration
	// HeartbeatTimeout bounds each coordinator call. A Postgres
	// heartbeat still running then may finish for as long again (capped
	// at 1s), when its grant is used; past that the call fails and the
	// statement finishes on its own, cancelled in the database if it
	// still runs 1s after the timeout, and the node's next heartbeat
	// waits for it to stop (see coord.Postgres.Heartbeat). The departure
	// Stop sends gets the same grace, so Stop may wait for it up to
	// HeartbeatTimeout plus 1s. Defaults to HeartbeatInterval. Must be in
	// [1ms, LeaseTTL]: no heartbeat, one round trip to the database, ends
	// sooner.
	HeartbeatTimeout time.Duration
	// MaxRequestDuration is the hard bound on a request's life, from its
	// admission until it has really ended at the upstream (for a streamed
	// response: its last byte). Every Lease's Context and every Transport
	// request carry it as their deadline, and the coordinator keeps
	// reserving the node's capacity for this long after its lease ends —
	// after a crash, a partition or an eviction — so requests that outlive
	// a lapsed lease stay counted. It is a safety bound, not a timeout:
	// a request that reaches it is cancelled and its slot freed at once,
	// while the upstream may go on serving it until it notices the client
	// gone, so a bound that cuts requests the upstream still serves lets
	// the fleet pass its ceiling for that long (docs/design.md §1). Above
	// the upstream's longest request (see below), a smaller bound frees a
	// dead node's capacity sooner and shortens the learning mode after a
	// database failover. The node asks the
	// coordinator to hold 0.1% more, for clock-rate drift. The bound runs
	// from admission, not from sending: a process stalled in between, a
	// wait for the key's rate (RateConfig: the slot is taken first), or a
	// wait for a connection, leaves the request that much less (Transport,
	// and a caller of Acquire that calls Lease.CheckSend, sends nothing
	// once the lease has lapsed since the admission, so a stall leaves at
	// least the bound less a LeaseTTL), so keep it above the upstream's
	// own longest request by a LeaseTTL, by the longest wait for the rate
	// and for a connection, and by the longest the network may hold a
	// request up on its way. Defaults to 5m.
	// Must be in [1ms, 23h].
	MaxRequestDuration time.Duration
	// AbandonedHold is how long the upstream may go on serving a request
	// after its client abandoned it — the caller's context ended, the body
	// was closed before its end, the connection failed after the request
	// was sent, an upload was cut after an early answer (Transport: a
	// large upload answered before the upstream read it, over HTTP/1.1).
	// The request's slot stays held that long (never past its
	// MaxRequestDuration bound), since the upstream may still count it.
	// Defaults to MaxRequestDuration, which is right for any upstream; an
	// upstream that stops serving as soon as the connection closes (most
	// streaming LLM APIs) needs only a second or two; 0 means the default,
	// so give such an upstream a small positive value. Must be 0 or in
	// [1ms, MaxRequestDuration] (a number with no unit is nanoseconds).
	AbandonedHold time.Duration
	// Outage selects what happens when heartbeats fail. Defaults to
	// FailClosed.
	Outage OutagePolicy

	// Limiter configures the local adaptive limiter whose estimate is this
	// node's inference of the whole upstream's capacity. Its InitialLimit
	// starts a new key's L_global; on a key that has one, the node's
	// estimate starts at L_global instead, and is set to it again at every
	// grant until the node's own samples (a clean round trip or a drop)
	// back it; under AIMD's slow start the steps taken just before each
	// report may then take it above L_global (see
	// adaptive.Limiter.ProbeTick and SlowStarting). Its
	// Clock must be left nil or be a real clock: the node's heartbeats and
	// fence run on real time. MaxQueued decides whether
	// Acquire waits for a slot (see adaptive.Config). With MaxQueued 0, the
	// default, a request finds no slot free, and is refused with
	// ErrQueueFull, also while the node holds no share — after a
	// heartbeat interval without requests, so sparse traffic meets it at
	// every request — and while a share that rose is being taken up (just
	// after Start, for one): the error says which. Set MaxQueued to let
	// such requests wait for the next grant instead. Its MaxLimit and
	// InitialLimit must be at most coord.MaxCount, the largest limit the
	// coordinator stores.
	Limiter adaptive.Config

	// Rate configures the node's part in the key's rate budgets: pacing
	// to its share of the key's request and token rates, and learning
	// them (see RateConfig). The zero value paces to the key's rates when
	// it has any.
	Rate RateConfig

	// Logger receives state changes: joins, share changes, drains, fencing,
	// outages. Defaults to slog.Default().
	Logger *slog.Logger

	marginDefaulted bool // withDefaults set FenceMargin
}

// minDefaultMargin is the least FenceMargin that withDefaults may derive:
// a LeaseTTL closer than twice that to HeartbeatInterval leaves no room
// for one, and New says so rather than run with none.
const minDefaultMargin = time.Millisecond

// withDefaults fills in every zero field.
func (c Config) withDefaults() Config {
	if c.NodeID == "" {
		host, err := os.Hostname()
		if err != nil || host == "" {
			host = "node"
		}
		c.NodeID = fmt.Sprintf("%s-%d", host, os.Getpid())
	}
	if c.HeartbeatInterval == 0 {
		c.HeartbeatInterval = time.Second
	}
	if c.LeaseTTL == 0 {
		c.LeaseTTL = max(2*c.HeartbeatInterval, coord.MinLeaseTTL)
	}
	if c.FenceMargin == 0 {
		// A quarter of the lease, but within the range validate wants
		// when the lease is set not far above the interval.
		c.FenceMargin = min(c.LeaseTTL/4, max((c.LeaseTTL-c.HeartbeatInterval)/2, 0))
		c.marginDefaulted = true
	}
	if c.HeartbeatTimeout == 0 {
		c.HeartbeatTimeout = c.HeartbeatInterval
	}
	if c.MaxRequestDuration == 0 {
		c.MaxRequestDuration = DefaultMaxRequestDuration
	}
	if c.AbandonedHold == 0 {
		c.AbandonedHold = c.MaxRequestDuration
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	c.Rate = c.Rate.withDefaults()
	return c
}

// validate reports every out-of-range field.
func (c Config) validate() error {
	var errs []error
	bad := func(format string, args ...any) {
		errs = append(errs, fmt.Errorf("fleet: Config."+format, args...))
	}
	// Key, NodeID and Labels go into every report: check them as the
	// coordinator will, so that the error names the field.
	if !coord.ValidName(c.Key) {
		bad("Key = %s, want 1..%d bytes of UTF-8 without NUL", quote.Short(c.Key), coord.MaxNameBytes)
	}
	if !coord.ValidName(c.NodeID) {
		bad("NodeID = %s, want 1..%d bytes of UTF-8 without NUL", quote.Short(c.NodeID), coord.MaxNameBytes)
	}
	for _, f := range []struct{ name, value string }{{"Key", c.Key}, {"NodeID", c.NodeID}} {
		if coord.Padded(f.value) {
			bad("%s = %s begins or ends with white space or a byte order mark: names are matched byte for byte (see coord.Padded)", f.name, quote.Short(f.value))
		}
	}
	withLabels := coord.Report{Key: "probe", NodeID: "probe", Instance: "probe", LLocal: 1, LeaseTTL: coord.MinLeaseTTL, Labels: c.Labels}
	if err := withLabels.Validate(); err != nil {
		bad("Labels: %v", strings.TrimPrefix(err.Error(), coord.ErrInvalidReport.Error()+": "))
	}
	// A field checked against a bad one (or whose default derives from
	// it) is not checked: its error would name a value the caller may
	// never have set.
	intervalOK := c.HeartbeatInterval >= 10*time.Millisecond && c.HeartbeatInterval <= 10*time.Minute
	if !intervalOK {
		bad("HeartbeatInterval = %v, want [10ms, 10m]", c.HeartbeatInterval)
	}
	ttlOK := c.LeaseTTL > c.HeartbeatInterval && c.LeaseTTL >= coord.MinLeaseTTL && c.LeaseTTL <= coord.MaxLeaseTTL
	if intervalOK && !ttlOK {
		bad("LeaseTTL = %v, want above HeartbeatInterval (%v) and in [%v, %v]",
			c.LeaseTTL, c.HeartbeatInterval, coord.MinLeaseTTL, coord.MaxLeaseTTL)
	}
	switch {
	case !intervalOK || !ttlOK:
	case c.marginDefaulted && c.FenceMargin < minDefaultMargin:
		bad("LeaseTTL = %v leaves no room for a FenceMargin above HeartbeatInterval (%v): want LeaseTTL ≥ HeartbeatInterval + %v, or a FenceMargin of your own",
			c.LeaseTTL, c.HeartbeatInterval, 2*minDefaultMargin)
	case c.FenceMargin < 0 || c.FenceMargin >= c.LeaseTTL-c.HeartbeatInterval:
		bad("FenceMargin = %v, want [0, LeaseTTL−HeartbeatInterval) = [0, %v)",
			c.FenceMargin, c.LeaseTTL-c.HeartbeatInterval)
	}
	if intervalOK && ttlOK && (c.HeartbeatTimeout < time.Millisecond || c.HeartbeatTimeout > c.LeaseTTL) {
		bad("HeartbeatTimeout = %v, want [1ms, LeaseTTL] = [1ms, %v]%s", c.HeartbeatTimeout, c.LeaseTTL, unitHint(c.HeartbeatTimeout))
	}
	boundOK := c.MaxRequestDuration >= time.Millisecond && c.MaxRequestDuration <= MaxRequestDurationLimit
	if !boundOK {
		bad("MaxRequestDuration = %v, want [1ms, %v]%s", c.MaxRequestDuration, MaxRequestDurationLimit, unitHint(c.MaxRequestDuration))
	}
	if boundOK && (c.AbandonedHold < time.Millisecond || c.AbandonedHold > c.MaxRequestDuration) {
		bad("AbandonedHold = %v, want 0 (MaxRequestDuration) or [1ms, MaxRequestDuration] = [1ms, %v]%s",
			c.AbandonedHold, c.MaxRequestDuration, unitHint(c.AbandonedHold))
	}
	// The coordinator stores no limit above coord.MaxCount: a larger
	// MaxLimit or InitialLimit would be cut to it without a word.
	if c.Limiter.MaxLimit > coord.MaxCount {
		bad("Limiter.MaxLimit = %d, want at most coord.MaxCount (%d), the largest limit the coordinator stores", c.Limiter.MaxLimit, coord.MaxCount)
	}
	if c.Limiter.InitialLimit > coord.MaxCount {
		bad("Limiter.InitialLimit = %d, want at most coord.MaxCount (%d), the largest limit the coordinator stores", c.Limiter.InitialLimit, coord.MaxCount)
	}
	if clk := c.Limiter.Clock; clk != nil {
		// The node's heartbeats, fence and request bounds run on real
		// time, and the limiter's on its clock: the two must agree.
		if reads, now := clk.Now(), time.Now(); reads.Sub(now).Abs() > time.Second {
			bad("Limiter.Clock reads %s, %v from the system clock: want nil or a real clock",
				reads.UTC().Format(time.RFC3339Nano), reads.Sub(now).Round(time.Millisecond))
		}
	}
	if c.Outage != FailClosed && c.Outage != HoldLastShare {
		bad("Outage = %v, want FailClosed or HoldLastShare", c.Outage)
	}
	if err := c.Rate.validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// unitHint follows the range of a duration field set to d in its error:
// a positive d under 1ms is likely a number given without its unit.
func unitHint(d time.Duration) string {
	if d > 0 && d < time.Millisecond {
		return " (a number with no unit is nanoseconds: write 5 * time.Second)"
	}
	return ""
}
