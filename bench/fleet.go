package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"slices"
	"sync"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/internal/sim"
)

// FleetWay is one way for a fleet of nodes to share a provider in the fleet
// comparison.
type FleetWay int

const (
	// StaticSplit gives every node a plain semaphore of C/N: it needs the
	// capacity C and the node count N, and does not follow C when it moves.
	StaticSplit FleetWay = iota
	// StaticFull gives every node a plain semaphore of C: each node
	// behaves as if it owned the whole quota.
	StaticFull
	// IndependentAdaptive gives every node its own adaptive.Limiter with no
	// coordinator: each infers the provider's capacity alone.
	IndependentAdaptive
	// Fleetlimit runs every node as a fleet.Node on one Postgres key and
	// sends through Node.Transport.
	Fleetlimit
)

// FleetWays lists the ways in table order.
func FleetWays() []FleetWay {
	return []FleetWay{StaticSplit, StaticFull, IndependentAdaptive, Fleetlimit}
}

// String returns the way's name for tables and plots.
func (w FleetWay) String() string {
	switch w {
	case StaticSplit:
		return "static C/N"
	case StaticFull:
		return "static C"
	case IndependentAdaptive:
		return "independent adaptive"
	case Fleetlimit:
		return "fleetlimit"
	default:
		return fmt.Sprintf("FleetWay(%d)", int(w))
	}
}

// Slug returns a file-name-safe name of the way ("static-cn").
func (w FleetWay) Slug() string {
	switch w {
	case StaticSplit:
		return "static-cn"
	case StaticFull:
		return "static-c"
	case IndependentAdaptive:
		return "independent"
	case Fleetlimit:
		return "fleetlimit"
	default:
		return fmt.Sprintf("way-%d", int(w))
	}
}

// FleetScenario describes one run of the fleet comparison: Nodes nodes,
// each with WorkersPerNode closed-loop workers, send to one simulated
// provider in 429 mode whose capacity is Capacity for the first third of
// Duration, Capacity/2 for the second and Capacity again for the last.
type FleetScenario struct {
	// Capacity is the provider's capacity C in the first and last thirds.
	Capacity int
	// Nodes is the fleet's size N.
	Nodes int
	// WorkersPerNode is how many workers send through each node, each one
	// request at a time.
	WorkersPerNode int
	// Workers, when set, gives each node its own number of workers
	// (len(Workers) must be Nodes), overriding WorkersPerNode: a fleet of
	// unequal demand.
	Workers []int
	// BaseLatency is the provider's latency within capacity.
	BaseLatency time.Duration
	// Duration is how long the load runs.
	Duration time.Duration
	// Settle is how long after the start and after each capacity step
	// the "steady state" measures (SteadyPeakRatio) ignore.
	Settle time.Duration
	// Heartbeat is the fleet nodes' heartbeat interval; their lease TTL is
	// 4× and their fence margin 1× that. It is also the grace after a
	// capacity drop that OuterPeakRatio excuses.
	Heartbeat time.Duration
	// SampleEvery is the resolution of the in-flight time series.
	SampleEvery time.Duration
	// RequestTimeout bounds every request; a timed-out request is a drop.
	RequestTimeout time.Duration
	// LatencyShaped makes the provider serve every request, slower above
	// its capacity (BaseLatency·k/C with k in flight), instead of
	// answering 429 there.
	LatencyShaped bool
	// Pause is how long a worker waits after a 429 or an error before it
	// sends again; it bounds the load that rejected requests put on the
	// machine.
	Pause time.Duration
}

// DefaultFleetScenario returns the scenario the report runs: 4 nodes,
// C = 40, 20 ms base latency, 3·C/N = 30 workers per node (demand 120,
// three times C), 18 s with steps at 6 s and 12 s, heartbeats every
// 100 ms, and a 20 ms pause after a 429.
func DefaultFleetScenario() FleetScenario {
	const capacity, nodes = 40, 4
	return FleetScenario{
		Capacity:       capacity,
		Nodes:          nodes,
		WorkersPerNode: 3 * capacity / nodes,
		BaseLatency:    20 * time.Millisecond,
		Duration:       18 * time.Second,
		Settle:         2 * time.Second,
		Heartbeat:      100 * time.Millisecond,
		SampleEvery:    10 * time.Millisecond,
		RequestTimeout: time.Second,
		Pause:          20 * time.Millisecond,
	}
}

// WorkersOf returns how many workers node i runs.
func (s FleetScenario) WorkersOf(i int) int {
	if s.Workers != nil {
		return s.Workers[i]
	}
	return s.WorkersPerNode
}

// TotalWorkers returns the fleet's demand: every node's workers.
func (s FleetScenario) TotalWorkers() int {
	n := 0
	for i := range s.Nodes {
		n += s.WorkersOf(i)
	}
	return n
}

// Steps returns the provider's capacity schedule.
func (s FleetScenario) Steps() []sim.Step {
	third := s.Duration / 3
	return []sim.Step{
		{At: 0, Capacity: s.Capacity},
		{At: third, Capacity: s.Capacity / 2},
		{At: 2 * third, Capacity: s.Capacity},
	}
}

// CapacityAt returns the capacity the schedule gives at offset t.
func (s FleetScenario) CapacityAt(t time.Duration) int {
	c := 0
	for _, st := range s.Steps() {
		if t >= st.At {
			c = st.Capacity
		}
	}
	return c
}

// IdealGoodput is the most a provider following the schedule can serve,
// in requests per second: the time-averaged capacity over BaseLatency.
func (s FleetScenario) IdealGoodput() float64 {
	var area float64 // capacity·seconds
	steps := s.Steps()
	for i, st := range steps {
		end := s.Duration
		if i+1 < len(steps) {
			end = steps[i+1].At
		}
		area += float64(st.Capacity) * (end - st.At).Seconds()
	}
	return area / s.Duration.Seconds() / s.BaseLatency.Seconds()
}

func (s FleetScenario) validate() error {
	switch {
	case s.Capacity < 2 || s.Nodes < 1 || s.Capacity < s.Nodes:
		return fmt.Errorf("bench: FleetScenario: Capacity = %d, Nodes = %d, want Capacity ≥ max(2, Nodes)", s.Capacity, s.Nodes)
	case s.Workers == nil && s.WorkersPerNode < 1:
		return fmt.Errorf("bench: FleetScenario.WorkersPerNode = %d, want ≥ 1", s.WorkersPerNode)
	case s.Workers != nil && len(s.Workers) != s.Nodes:
		return fmt.Errorf("bench: FleetScenario.Workers has %d entries, want Nodes = %d", len(s.Workers), s.Nodes)
	case s.Workers != nil && slices.Min(s.Workers) < 1:
		return fmt.Errorf("bench: FleetScenario.Workers = %v, want every entry ≥ 1", s.Workers)
	case s.BaseLatency <= 0 || s.Duration < 3*time.Second || s.SampleEvery <= 0 || s.RequestTimeout <= 0 || s.Pause < 0:
		return errors.New("bench: FleetScenario: BaseLatency, SampleEvery, RequestTimeout must be > 0, Duration ≥ 3s, Pause ≥ 0")
	case s.Settle < 0 || s.Settle >= s.Duration/3:
		return fmt.Errorf("bench: FleetScenario.Settle = %v, want [0, Duration/3)", s.Settle)
	case s.Heartbeat < 10*time.Millisecond:
		return fmt.Errorf("bench: FleetScenario.Heartbeat = %v, want ≥ 10ms", s.Heartbeat)
	}
	return nil
}

// FleetLimiterConfig returns the adaptive.Config of the independent
// adaptive nodes and of the fleetlimit nodes' local limiters: the
// library's preset for a flat-latency upstream, adaptive.FlatLatency. In
// 429 mode the provider's latency is flat (a request over capacity is
// refused, never slowed), so the refusals are the only signal.
// InitialLimit is the library default (20): neither C nor N is known.
// maxQueued lets every worker of a node wait for a slot.
func FleetLimiterConfig(maxQueued int) adaptive.Config {
	cfg := adaptive.FlatLatency()
	cfg.MaxQueued = maxQueued
	return cfg
}

// FleetSample is one point of a run's time series.
type FleetSample struct {
	// At is the offset of the sample's end from the start of the load.
	At time.Duration
	// Capacity is the provider's capacity then.
	Capacity int
	// Inflight is the mean attempted in-flight count of the whole fleet
	// over the sample's interval (see FleetResult).
	Inflight float64
	// LGlobal is the fleet's global limit as node 0 last heard it
	// (fleetlimit only; 0 otherwise).
	LGlobal int
	// MeanEstimate is the mean of the nodes' limiter estimates and Drops
	// the total of their drops so far (adaptive ways only; 0 otherwise).
	MeanEstimate float64
	Drops        uint64
	// Succeeded and Rejected count the requests that ended in the
	// interval with a 200 and a 429.
	Succeeded, Rejected int64
}

// FleetResult is what one run of one way measured. Requests are counted at
// the client, below each way's admission: "attempted" in-flight counts a
// request from just before it is sent until its response body is closed
// (or it fails), on all nodes together, so it includes requests the
// provider answers 429 at once — the provider itself never holds more than
// its capacity in 429 mode, so its own maximum says nothing.
type FleetResult struct {
	Way      FleetWay
	Scenario FleetScenario
	// Elapsed is how long the load actually ran.
	Elapsed time.Duration
	// Sent, Succeeded, Rejected and Failed count requests over the run:
	// sent to the provider, answered 200 with the whole body read,
	// answered 429, and any other outcome (transport error, timeout,
	// other status).
	Sent, Succeeded, Rejected, Failed int64
	// NodeSucceeded is Succeeded per node.
	NodeSucceeded []int64
	// Latencies are the round-trip times of the successful requests (from
	// send to the body's end), in completion order.
	Latencies []time.Duration
	// PeakInflight is the largest attempted in-flight count, and
	// PeakRatio the largest ratio of attempted in-flight to the capacity
	// at that instant; PeakAt is when it happened.
	PeakInflight int
	PeakRatio    float64
	PeakAt       time.Duration
	// SteadyPeakRatio is PeakRatio outside the Settle after the start
	// and after each capacity step.
	SteadyPeakRatio float64
	// OuterPeakRatio is PeakRatio outside [s, s+Heartbeat) for each step
	// s that lowers the capacity, the grace the fleet's peak target
	// allows: the start and the climbs count. OuterPeakAt is when it
	// happened. All three peaks are checked at every send and at every
	// step and window end, so a count that stays up counts too.
	OuterPeakRatio float64
	OuterPeakAt    time.Duration
	// CarriedRatio is, at the end of the first heartbeat after a step
	// that lowers the capacity, the attempted in-flight of requests sent
	// before the step, over the capacity then (the largest over such
	// steps): what no admission after the step could have held back.
	// Above OuterPeakRatio's target it shows the target out of reach in
	// the scenario: requests outlast the heartbeat.
	CarriedRatio float64
	// OverCapacity is the total time the attempted in-flight count was
	// above the capacity.
	OverCapacity time.Duration
	// Series is the in-flight time series, one sample per SampleEvery.
	Series []FleetSample
	// ServerSuccesses and ServerRejected are the provider's own counts.
	ServerSuccesses, ServerRejected int64
	// ServerOverCapacity is the total time the provider's own in-flight
	// count (its handlers, from arrival to the response's end) was above
	// the capacity.
	ServerOverCapacity time.Duration
}

// Goodput returns successful requests per second.
func (r FleetResult) Goodput() float64 { return float64(r.Succeeded) / r.Elapsed.Seconds() }

// MedianInflightRatio returns the median over the series of the fleet's
// mean attempted in-flight ÷ the capacity then.
func (r FleetResult) MedianInflightRatio() float64 {
	var ratios []float64
	for _, s := range r.Series {
		if s.Capacity > 0 {
			ratios = append(ratios, s.Inflight/float64(s.Capacity))
		}
	}
	return Summarize(ratios).Median
}

// QuotaUsed returns how full the fleet kept the provider's quota over the
// samples that end in (from, to]: the mean over them of the attempted
// in-flight, capped at the capacity, ÷ the capacity. A full quota is 1;
// in-flight above the capacity counts as full, not more. It returns NaN
// when no sample falls in the window.
func (r FleetResult) QuotaUsed(from, to time.Duration) float64 {
	var sum float64
	n := 0
	for _, s := range r.Series {
		if s.At <= from || s.At > to || s.Capacity <= 0 {
			continue
		}
		sum += min(s.Inflight, float64(s.Capacity)) / float64(s.Capacity)
		n++
	}
	if n == 0 {
		return math.NaN()
	}
	return sum / float64(n)
}

// RejectedFraction returns 429s ÷ requests sent.
func (r FleetResult) RejectedFraction() float64 {
	if r.Sent == 0 {
		return 0
	}
	return float64(r.Rejected) / float64(r.Sent)
}

// FleetEnv is what RunFleetWay needs beyond the scenario.
type FleetEnv struct {
	// Pool connects to a migrated fleetlimit database; required for the
	// Fleetlimit way only.
	Pool *pgxpool.Pool
	// Key names the fleetlimit key of the run; use a fresh one per run.
	Key string
	// Logger receives the fleet nodes' logs. Defaults to discarding them.
	Logger *slog.Logger
	// Limiter returns the adaptive.Config of the adaptive ways' limiters
	// for a given MaxQueued. Defaults to FleetLimiterConfig.
	Limiter func(maxQueued int) adaptive.Config
}

// RunFleetWay starts a provider for sc, runs way's nodes and workers
// against it for sc.Duration, stops everything and returns the
// measurements. Every server and request stays on 127.0.0.1.
func RunFleetWay(ctx context.Context, sc FleetScenario, way FleetWay, env FleetEnv) (FleetResult, error) {
	if err := sc.validate(); err != nil {
		return FleetResult{}, err
	}
	if env.Logger == nil {
		env.Logger = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if env.Limiter == nil {
		env.Limiter = FleetLimiterConfig
	}
	// The nodes first (a fleet node's first heartbeat takes a moment),
	// then the provider, whose capacity schedule starts when it is
	// created: the load starts right after.
	nodes, err := newFleetNodes(ctx, sc, way, env)
	if err != nil {
		return FleetResult{}, err
	}
	defer nodes.stop()
	prov, err := sim.StartProvider(sim.ProviderConfig{
		Capacity:    sim.Stepped(sc.Steps()),
		BaseLatency: sc.BaseLatency,
		Reject429:   !sc.LatencyShaped,
	})
	if err != nil {
		return FleetResult{}, fmt.Errorf("bench: fleet: %w", err)
	}
	defer prov.Close()
	start := time.Now()

	m := newMeter(sc)
	clients := make([]*http.Client, sc.Nodes)
	bases := make([]*http.Transport, sc.Nodes)
	for i := range clients {
		bases[i] = &http.Transport{
			MaxIdleConns:        sc.WorkersOf(i) * 2,
			MaxIdleConnsPerHost: sc.WorkersOf(i) * 2,
			IdleConnTimeout:     30 * time.Second,
		}
		clients[i] = &http.Client{Transport: nodes.transport(i, &countingTransport{base: bases[i], meter: m, node: i})}
	}
	defer func() {
		for _, b := range bases {
			b.CloseIdleConnections()
		}
	}()

	// The meter's clock starts with the provider's schedule; the load
	// runs until the schedule's end.
	m.begin(start)
	loadCtx, cancel := context.WithDeadline(ctx, start.Add(sc.Duration))
	defer cancel()
	var wg sync.WaitGroup
	sampleDone := make(chan struct{})
	go func() {
		defer close(sampleDone)
		m.sampleLoop(loadCtx, nodes.probe)
	}()
	for i := range sc.Nodes {
		for range sc.WorkersOf(i) {
			wg.Go(func() { worker(loadCtx, sc, clients[i], prov.URL(), i) })
		}
	}
	wg.Wait()
	<-sampleDone
	res := m.result(way, sc)
	st := prov.Stats()
	res.ServerSuccesses, res.ServerRejected = st.Successes, st.Rejected
	res.ServerOverCapacity = st.OverCapacity
	if err := ctx.Err(); err != nil {
		return res, err
	}
	return res, nil
}

// worker sends one request at a time through client until ctx ends.
func worker(ctx context.Context, sc FleetScenario, client *http.Client, url string, node int) {
	header := fmt.Sprintf("node-%d", node)
	for ctx.Err() == nil {
		reqCtx, cancel := context.WithTimeout(ctx, sc.RequestTimeout)
		req, err := http.NewRequestWithContext(reqCtx, http.MethodGet, url, nil)
		if err != nil {
			cancel()
			panic(err) // the URL is ours
		}
		req.Header.Set(sim.DefaultClientHeader, header)
		resp, err := client.Do(req)
		ok := false
		if err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
			ok = resp.StatusCode == http.StatusOK
		}
		cancel()
		if !ok {
			sleepCtx(ctx, sc.Pause)
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) {
	if d <= 0 {
		return
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
