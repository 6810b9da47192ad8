package coord_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleettest"
)

// coordinator is what the conformance test drives.
type coordinator interface {
	coord.Coordinator
	coord.Admin
}

// conformanceKeys include SQL metacharacters and non-ASCII text: they must
// be plain data.
var conformanceKeys = []string{
	"openai:gpt-4o",
	`'; DROP TABLE fleetlimit.nodes; --`,
	`ключ "🔑" \ %s $1`,
}

const (
	conformanceSeeds = 4
	conformanceSteps = 3000 // per seed
)

// TestConformance drives Memory and Postgres (on one fake clock) with the
// same random operations and requires identical results and identical
// tables after every step. Odd seeds send reports to the database
// unvalidated, so its own checks are compared with Report.Validate.
func TestConformance(t *testing.T) {
	t.Parallel()
	steps := conformanceSteps
	if testing.Short() {
		steps = 300
	}
	for seed := uint64(1); seed <= conformanceSeeds; seed++ {
		t.Run(fmt.Sprintf("seed=%d", seed), func(t *testing.T) {
			t.Parallel()
			clock := newFakeClock(t0)
			pg := newPostgres(t, fleettest.Pool(t), coord.WithClock(clock))
			coord.SetSkipValidation(pg, seed%2 == 1)
			c := &conformance{
				t:     t,
				rng:   rand.New(rand.NewPCG(seed, 42)),
				clock: clock,
				impls: []coordinator{coord.NewMemory(clock), pg},
				nodes: map[[2]string]*simNode{},
			}
			for range steps {
				c.step()
			}
			t.Logf("seed %d: %d steps, %d grants, %d stale, %d errors", seed, steps, c.grants, c.stale, c.errs)
			require.Positive(t, c.grants)
			require.Positive(t, c.stale)
			require.Positive(t, c.errs)
		})
	}
}

type simNode struct {
	instance   string
	seq        int64
	epoch      int64
	appliedGen int64
	restarts   int
}

type conformance struct {
	t       *testing.T
	rng     *rand.Rand
	clock   *fakeClock
	impls   []coordinator
	nodes   map[[2]string]*simNode
	pending []coord.Report

	grants, stale, errs int
}

func (c *conformance) key() string    { return conformanceKeys[c.rng.IntN(len(conformanceKeys))] }
func (c *conformance) nodeID() string { return fmt.Sprintf("node-%d", c.rng.IntN(5)) }

func (c *conformance) node(key, id string) *simNode {
	n, ok := c.nodes[[2]string{key, id}]
	if !ok {
		n = &simNode{instance: id + "/run-0"}
		c.nodes[[2]string{key, id}] = n
	}
	return n
}

// report makes a fresh, valid report of a random node.
func (c *conformance) report() coord.Report {
	key, id := c.key(), c.nodeID()
	n := c.node(key, id)
	n.seq++
	inflight := c.rng.IntN(6)
	r := coord.Report{
		Key: key, NodeID: id, Instance: n.instance, Seq: n.seq,
		LLocal: 1 + c.rng.IntN(12), Inflight: inflight, Demand: inflight + c.rng.IntN(4),
		Epoch: n.epoch, AppliedGen: n.appliedGen, LeaseTTL: time.Duration(100+c.rng.IntN(2900)) * time.Millisecond,
		MaxRequestDuration: time.Duration(c.rng.IntN(4)) * 700 * time.Millisecond,
	}
	if c.rng.IntN(4) == 0 && n.appliedGen > 0 {
		r.AppliedGen = c.rng.Int64N(n.appliedGen) // an older grant still enforced
	}
	if c.rng.IntN(40) == 0 {
		r.AppliedGen += 1 + c.rng.Int64N(3) // a grant the coordinator forgot
	}
	if c.rng.IntN(5) == 0 {
		r.Labels = map[string]string{"zone": fmt.Sprintf("z%d", c.rng.IntN(3)), "q": `it's "quoted"`}
	}
	if c.rng.IntN(3) != 0 {
		r.RateLocal = coord.Rates{Requests: c.rate(), Tokens: c.rate()}
		if key == conformanceKeys[2] && c.rng.IntN(8) != 0 {
			// Rows that seldom hold a learned rate: the rate rule's scan
			// is skipped while none does and the key has no rate.
			r.RateLocal = coord.Rates{}
		}
		r.RateDemand = coord.Rates{Requests: c.rate(), Tokens: c.rate()}
		r.RateApplied = coord.Rates{Requests: c.rate(), Tokens: c.rate()}
		r.RateUsed = coord.Rates{Requests: c.rate(), Tokens: c.rate()}
	}
	return r
}

// rate is a random rate per minute: none a third of the time.
func (c *conformance) rate() int64 {
	if c.rng.IntN(3) == 0 {
		return 0
	}
	return 1 + c.rng.Int64N(600)
}

func (c *conformance) step() {
	t := c.t
	t.Helper()
	ctx := context.Background()
	var (
		op      string
		results []result
	)
	each := func(fn func(coordinator) result) {
		results = results[:0]
		for _, impl := range c.impls {
			results = append(results, fn(impl))
		}
	}
	switch p := c.rng.IntN(100); {
	case p < 35: // a heartbeat, now or later
		r := c.report()
		if c.rng.IntN(2) == 0 {
			c.pending = append(c.pending, r)
			return
		}
		op = fmt.Sprintf("heartbeat %+v", r)
		each(func(impl coordinator) result { return heartbeatResult(impl.Heartbeat(ctx, r)) })
	case p < 52: // a delayed report, in any order, sometimes twice
		if len(c.pending) == 0 {
			return
		}
		i := c.rng.IntN(len(c.pending))
		r := c.pending[i]
		if c.rng.IntN(4) != 0 {
			c.pending = append(c.pending[:i], c.pending[i+1:]...)
		}
		op = fmt.Sprintf("late heartbeat %+v", r)
		each(func(impl coordinator) result { return heartbeatResult(impl.Heartbeat(ctx, r)) })
	case p < 57: // a bad report
		r := c.report()
		mutate := badReports[c.rng.IntN(len(badReports))]
		mutate.fn(&r)
		op = "bad report " + mutate.name
		each(func(impl coordinator) result { return heartbeatResult(impl.Heartbeat(ctx, r)) })
	case p < 62: // a restart: a new instance, its seq from 0
		key, id := c.key(), c.nodeID()
		n := c.node(key, id)
		n.restarts++
		n.instance = fmt.Sprintf("%s/run-%d", id, n.restarts)
		n.seq, n.epoch, n.appliedGen = 0, 0, 0
		return
	case p < 67:
		key, id := c.key(), c.nodeID()
		instance := c.node(key, id).instance
		if c.rng.IntN(5) == 0 {
			instance = "someone-else"
		}
		d := coord.Departure{Key: key, NodeID: id, Instance: instance}
		if c.rng.IntN(2) == 0 {
			d.Inflight, d.Hold = c.rng.IntN(4), time.Duration(c.rng.IntN(3000))*time.Millisecond
		}
		op = fmt.Sprintf("leave %+v", d)
		each(func(impl coordinator) result { return errResult(impl.Leave(ctx, d)) })
	case p < 72:
		key, id := c.key(), c.nodeID()
		op = fmt.Sprintf("drain %q %q", key, id)
		each(func(impl coordinator) result { return errResult(impl.Drain(ctx, key, id)) })
	case p < 76:
		key, id := c.key(), c.nodeID()
		op = fmt.Sprintf("undrain %q %q", key, id)
		each(func(impl coordinator) result { return errResult(impl.Undrain(ctx, key, id)) })
	case p < 79:
		key, id := c.key(), c.nodeID()
		op = fmt.Sprintf("evict %q %q", key, id)
		each(func(impl coordinator) result { return errResult(impl.Evict(ctx, key, id)) })
	case p < 83:
		key := c.key()
		minLimit, maxLimit := c.limit(), c.limit()
		op = fmt.Sprintf("set limits %q %v %v", key, deref(minLimit), deref(maxLimit))
		each(func(impl coordinator) result { return errResult(impl.SetLimits(ctx, key, minLimit, maxLimit)) })
	case p < 84:
		key := c.key()
		ch := coord.LimitsChange{SetMin: c.rng.IntN(2) == 0, SetMax: c.rng.IntN(2) == 0, Min: c.limit(), Max: c.limit()}
		op = fmt.Sprintf("update limits %q %v %v %v %v", key, ch.SetMin, deref(ch.Min), ch.SetMax, deref(ch.Max))
		each(func(impl coordinator) result {
			_, _, err := impl.UpdateLimits(ctx, key, ch)
			return errResult(err)
		})
	case p < 85:
		key := c.key()
		a := []coord.Aggregate{coord.AggregateLowerMedian, coord.AggregateMin, "sum"}[c.rng.IntN(3)]
		op = fmt.Sprintf("set aggregate %q %q", key, a)
		each(func(impl coordinator) result { return errResult(impl.SetAggregate(ctx, key, a)) })
	case p < 86 && c.rng.IntN(4) == 0: // an operator deleting or creating a key
		key := c.key()
		if c.rng.IntN(2) == 0 {
			force := c.rng.IntN(2) == 0
			op = fmt.Sprintf("delete key %q force %v", key, force)
			each(func(impl coordinator) result { return errResult(impl.DeleteKey(ctx, key, force)) })
		} else {
			minLimit, maxLimit := c.limit(), c.limit()
			rates := coord.Rates{Requests: []int64{0, 600, -1}[c.rng.IntN(3)], Tokens: []int64{0, 90000}[c.rng.IntN(2)]}
			op = fmt.Sprintf("create key %q %v %v rates %+v", key, deref(minLimit), deref(maxLimit), rates)
			each(func(impl coordinator) result {
				return errResult(impl.CreateKey(ctx, key, minLimit, maxLimit, coord.WithRates(rates)))
			})
		}
	case p < 86: // an operator forcing learning mode, on a key or not
		key := c.key()
		if c.rng.IntN(3) == 0 {
			key = "no such key"
		}
		op = fmt.Sprintf("relearn %q", key)
		each(func(impl coordinator) result {
			_, err := impl.Relearn(ctx, key)
			return errResult(err)
		})
	case p < 87:
		key := []string{"no such key", "", "nul\x00key"}[c.rng.IntN(3)]
		op = fmt.Sprintf("nodes of %q", key)
		each(func(impl coordinator) result {
			_, err := impl.Nodes(ctx, key)
			return errResult(err)
		})
	case p < 89: // an operator setting a key's rates, some of them bad
		key := c.key()
		ch := coord.RatesChange{SetRequests: c.rng.IntN(2) == 0, Requests: c.rate(), SetTokens: c.rng.IntN(2) == 0, Tokens: c.rate()}
		if c.rng.IntN(8) == 0 {
			ch.Tokens = []int64{-1, coord.MaxRate + 1}[c.rng.IntN(2)]
		}
		op = fmt.Sprintf("set rates %q %+v", key, ch)
		each(func(impl coordinator) result {
			_, err := impl.SetRates(ctx, key, ch)
			return errResult(err)
		})
	default: // time passes, sometimes past every lease
		d := time.Duration(c.rng.IntN(700)) * time.Millisecond
		if c.rng.IntN(8) == 0 {
			d = 3 * time.Second
		}
		c.clock.Advance(d + time.Duration(c.rng.IntN(1000))*time.Nanosecond)
		op = "advance " + d.String()
	}
	if len(results) == 2 {
		require.Equal(t, results[0], results[1], "step %q: memory vs postgres", op)
		require.False(t, strings.HasPrefix(results[0].err, "other:"), "step %q: %s", op, results[0].err)
		c.tally(results[0])
	}
	c.compareTables(op)
}

func (c *conformance) tally(r result) {
	switch {
	case r.err != "":
		c.errs++
	case r.grant != nil && r.grant.Stale:
		c.stale++
	case r.grant != nil:
		c.grants++
		// The node applies the grant, as a real one would.
	}
}

func (c *conformance) limit() *int {
	switch c.rng.IntN(4) {
	case 0:
		return nil
	case 1:
		v := []int{0, -3, coord.MaxCount + 1}[c.rng.IntN(3)]
		return &v
	}
	v := 1 + c.rng.IntN(12)
	return &v
}

func deref(p *int) any {
	if p == nil {
		return nil
	}
	return *p
}

// compareTables requires both implementations to hold the same rows.
func (c *conformance) compareTables(op string) {
	t := c.t
	ctx := context.Background()
	var keys [2][]coord.KeyInfo
	for i, impl := range c.impls {
		ks, err := impl.Keys(ctx)
		require.NoError(t, err)
		for j := range ks {
			ks[j].CreatedAt = ks[j].CreatedAt.UTC()
			ks[j].LearningUntil = ks[j].LearningUntil.UTC()
		}
		keys[i] = ks
	}
	require.Equal(t, keys[0], keys[1], "after %q: keys", op)
	for _, k := range keys[0] {
		var nodes [2][]coord.NodeInfo
		for i, impl := range c.impls {
			ns, err := impl.Nodes(ctx, k.Key)
			require.NoError(t, err)
			for j := range ns {
				ns[j].LeaseExpiresAt = ns[j].LeaseExpiresAt.UTC()
				ns[j].HoldUntil = ns[j].HoldUntil.UTC()
				ns[j].JoinedAt = ns[j].JoinedAt.UTC()
				ns[j].HeartbeatAt = ns[j].HeartbeatAt.UTC()
			}
			nodes[i] = ns
		}
		require.Equal(t, nodes[0], nodes[1], "after %q: nodes of %q", op, k.Key)
		// Remember the newest grant each node could have applied.
		for _, n := range nodes[0] {
			if sn := c.node(k.Key, n.NodeID); sn.instance == n.Instance && c.rng.IntN(2) == 0 &&
				(n.Epoch > sn.epoch || n.Epoch == sn.epoch && n.GrantedGen > sn.appliedGen) {
				sn.epoch, sn.appliedGen = n.Epoch, n.GrantedGen
			}
		}
	}
}

// result is a call's outcome in comparable form.
type result struct {
	grant *coord.Grant
	err   string // the sentinel's name, "" for success
}

func heartbeatResult(g coord.Grant, err error) result {
	if err != nil {
		return errResult(err)
	}
	return result{grant: &g}
}

func errResult(err error) result {
	if err == nil {
		return result{}
	}
	for _, s := range []error{coord.ErrInvalidReport, coord.ErrNodeIDInUse, coord.ErrUnknownKey, coord.ErrUnknownNode, coord.ErrInvalidOverride, coord.ErrKeyExists, coord.ErrLiveNodes, coord.ErrHeldCapacity, coord.ErrLearning} {
		if errors.Is(err, s) {
			return result{err: s.Error()}
		}
	}
	return result{err: "other: " + err.Error()}
}

// badReports break exactly one bound each.
var badReports = []struct {
	name string
	fn   func(r *coord.Report)
}{
	{"empty key", func(r *coord.Report) { r.Key = "" }},
	{"long key", func(r *coord.Report) { r.Key = strings.Repeat("k", coord.MaxNameBytes+1) }},
	{"NUL key", func(r *coord.Report) { r.Key = "a\x00b" }},
	{"invalid UTF-8 node id", func(r *coord.Report) { r.NodeID = "n\xff" }},
	{"10 KB node id", func(r *coord.Report) { r.NodeID = strings.Repeat("n", 10<<10) }},
	{"empty instance", func(r *coord.Report) { r.Instance = "" }},
	{"negative seq", func(r *coord.Report) { r.Seq = -1 }},
	{"zero l_local", func(r *coord.Report) { r.LLocal = 0 }},
	{"max int l_local", func(r *coord.Report) { r.LLocal = 1<<63 - 1 }},
	{"negative inflight", func(r *coord.Report) { r.Inflight = -1 }},
	{"huge demand", func(r *coord.Report) { r.Demand = coord.MaxCount + 1 }},
	{"negative applied gen", func(r *coord.Report) { r.AppliedGen = -7 }},
	{"negative epoch", func(r *coord.Report) { r.Epoch = -1 }},
	{"negative request bound", func(r *coord.Report) { r.MaxRequestDuration = -time.Second }},
	{"request bound over a day", func(r *coord.Report) { r.MaxRequestDuration = coord.MaxRequestBound + time.Microsecond }},
	{"short lease", func(r *coord.Report) { r.LeaseTTL = 99 * time.Millisecond }},
	{"long lease", func(r *coord.Report) { r.LeaseTTL = coord.MaxLeaseTTL + time.Millisecond }},
	{"NUL label", func(r *coord.Report) { r.Labels = map[string]string{"a": "x\x00y"} }},
	{"negative learned rate", func(r *coord.Report) { r.RateLocal.Requests = -1 }},
	{"huge token demand", func(r *coord.Report) { r.RateDemand.Tokens = coord.MaxRate + 1 }},
	{"negative applied rate", func(r *coord.Report) { r.RateApplied.Tokens = -5 }},
	{"huge used rate", func(r *coord.Report) { r.RateUsed.Requests = coord.MaxRate + 1 }},
	{"negative used tokens", func(r *coord.Report) { r.RateUsed.Tokens = -1 }},
	{"long label", func(r *coord.Report) { r.Labels = map[string]string{"a": strings.Repeat("v", coord.MaxNameBytes+1)} }},
	{"many labels", func(r *coord.Report) {
		r.Labels = map[string]string{}
		for i := range coord.MaxLabels + 1 {
			r.Labels[fmt.Sprint(i)] = "v"
		}
	}},
}
