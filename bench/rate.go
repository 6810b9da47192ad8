package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleet"
	"github.com/fleetlimit/fleetlimit/internal/sim"
	"github.com/fleetlimit/fleetlimit/pace"
)

// RateWay is one way a fleet shares a provider's rate quota.
type RateWay int

// The rate ways compared.
const (
	// RateGiven: fleetlimit nodes, the quota set on the key by an operator
	// (fleetctl limits set --rpm --tpm), changed when the provider's is.
	RateGiven RateWay = iota
	// RateLearned: fleetlimit nodes learning the key's request rate from
	// the 429s (RateConfig.Learn), nothing given, no quota headers.
	RateLearned
	// RateStatic: every node paces itself to quota / N, by hand.
	RateStatic
	// RatePerPod: every node paces itself to the whole quota, as a
	// per-pod limit does (LiteLLM's deployment TPM limit, BerriAI/litellm
	// #27736).
	RatePerPod
)

// RateWays lists every way, in report order.
func RateWays() []RateWay { return []RateWay{RateGiven, RateLearned, RateStatic, RatePerPod} }

// String returns the way's name.
func (w RateWay) String() string {
	switch w {
	case RateGiven:
		return "fleetlimit, quota given"
	case RateLearned:
		return "fleetlimit, quota learned"
	case RateStatic:
		return "static split (quota / N)"
	case RatePerPod:
		return "per-pod quota (each node the whole quota)"
	}
	return fmt.Sprintf("RateWay(%d)", int(w))
}

// RateScenario is the rate comparison: closed-loop workers on nodes of
// unequal demand, sending to a provider that enforces a requests- and a
// tokens-per-window quota over a sliding window and answers 429 above
// it; the quota changes once, at the end of the first phase.
type RateScenario struct {
	// Workers per node.
	Workers []int
	// Window is the provider's quota window (and the nodes' RateConfig
	// Window).
	Window time.Duration
	// Phase is how long each quota lasts; a run is two phases.
	Phase time.Duration
	// Quotas are the quota per window in the first and second phase.
	Quotas [2]sim.RateQuota
	// Latency is the provider's latency per request.
	Latency time.Duration
	// Tokens is the tokens a request costs: uniform in [Tokens/2,
	// 3·Tokens/2]; a request is admitted with the estimate Tokens and
	// settled by what the provider reports it cost.
	Tokens int64
	// Heartbeat is the fleetlimit nodes' HeartbeatInterval.
	Heartbeat time.Duration
	// Learner configures the learning way's nodes.
	Learner pace.LearnerConfig
}

// DefaultRateScenario returns the scenario the report runs: 8 nodes of
// 16, 16, 4, 4, 2, 2, 1 and 1 workers (46 in all, able to send 920
// requests a second at 50 ms each), a 10-second window whose quota is
// 1,200 requests and 60,000 tokens (tokens bind: at 100 tokens a request,
// 600 requests) for 30 s, then 1,200 requests and 150,000 tokens
// (requests bind) for 30 s.
func DefaultRateScenario() RateScenario {
	return RateScenario{
		Workers:   []int{16, 16, 4, 4, 2, 2, 1, 1},
		Window:    10 * time.Second,
		Phase:     30 * time.Second,
		Quotas:    [2]sim.RateQuota{{Requests: 1200, Tokens: 60000}, {Requests: 1200, Tokens: 150000}},
		Latency:   50 * time.Millisecond,
		Tokens:    100,
		Heartbeat: 500 * time.Millisecond,
		// The whole key's request rate: start at 30 a second, within 5 to
		// 400, judged every 2 s, cut above 3 % of 429s, 15 a second more
		// below 1 %.
		Learner: pace.LearnerConfig{SeedRate: 30, MinRate: 5, MaxRate: 400, CheckPeriod: 2 * time.Second, SpeedupStep: 15,
			TargetErrorPct: 3, RecoverPct: 1},
	}
}

// RateResult is one way's run.
type RateResult struct {
	Way RateWay
	// Windows are the provider's tumbling windows, in order.
	Windows []sim.WindowStats
	// Accepted and Refused are the requests the provider accepted and
	// answered 429, and the tokens they stated.
	Accepted, Refused sim.RateUsage
	// Heartbeats counts the fleetlimit nodes' heartbeats (0 for the other
	// ways), and Elapsed the run's length.
	Heartbeats int64
	Elapsed    time.Duration
	// FinalShares are the fleetlimit nodes' request rate shares per
	// minute at the end, by node.
	FinalShares []int64
}

// Used is the mean, over the windows that ended within the run, of the
// binding dimension's use: the larger of accepted ÷ quota for requests
// and for tokens.
func (r RateResult) Used() float64 {
	var sum float64
	n := 0
	for i, w := range r.Windows {
		if i == len(r.Windows)-1 {
			break // in progress
		}
		sum += max(ratio(w.Accepted.Requests, w.Quota.Requests), ratio(w.Accepted.Tokens, w.Quota.Tokens))
		n++
	}
	if n == 0 {
		return 0
	}
	return sum / float64(n)
}

// PeakOver is the largest ratio of a sliding window's content to the
// quota, on either dimension, over the run's windows.
func (r RateResult) PeakOver() float64 {
	var peak float64
	for _, w := range r.Windows {
		peak = max(peak, ratio(w.Peak.Requests, w.Quota.Requests), ratio(w.Peak.Tokens, w.Quota.Tokens))
	}
	return peak
}

// RefusedFraction is the share of requests answered 429.
func (r RateResult) RefusedFraction() float64 {
	return ratio(r.Refused.Requests, r.Accepted.Requests+r.Refused.Requests)
}

func ratio(a, b int64) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// perMinute converts a quota per window to per minute.
func (sc RateScenario) perMinute(q sim.RateQuota) coord.Rates {
	f := float64(time.Minute) / float64(sc.Window)
	return coord.Rates{Requests: int64(float64(q.Requests) * f), Tokens: int64(float64(q.Tokens) * f)}
}

// countingCoordinator counts heartbeats.
type countingCoordinator struct {
	coord.Coordinator
	beats atomic.Int64
}

func (c *countingCoordinator) Heartbeat(ctx context.Context, r coord.Report) (coord.Grant, error) {
	c.beats.Add(1)
	return c.Coordinator.Heartbeat(ctx, r)
}

// RunRateWay runs one way of sc against a fresh provider; the fleetlimit
// ways coordinate through pool, on a key of their own.
func RunRateWay(ctx context.Context, sc RateScenario, way RateWay, pool *pgxpool.Pool) (RateResult, error) {
	pg, err := coord.NewPostgres(pool)
	if err != nil {
		return RateResult{}, err
	}
	key := fmt.Sprintf("rate-%d-%d", way, time.Now().UnixNano())
	counting := &countingCoordinator{Coordinator: pg}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))

	var (
		nodes   []*fleet.Node
		pacers  []*pace.Pacer
		clients = make([]*http.Client, len(sc.Workers))
		bases   = make([]*http.Transport, len(sc.Workers))
	)
	for i, w := range sc.Workers {
		bases[i] = &http.Transport{MaxIdleConns: 2 * w, MaxIdleConnsPerHost: 2 * w}
	}
	defer func() {
		for _, b := range bases {
			b.CloseIdleConnections()
		}
	}()
	switch way {
	case RateGiven, RateLearned:
		if way == RateGiven {
			if err := pg.CreateKey(ctx, key, nil, nil); err != nil {
				return RateResult{}, err
			}
			if err := setRates(ctx, pg, key, sc.perMinute(sc.Quotas[0])); err != nil {
				return RateResult{}, err
			}
		}
		for i := range sc.Workers {
			cfg := fleet.Config{
				Key: key, NodeID: fmt.Sprintf("node-%d", i), HeartbeatInterval: sc.Heartbeat, Logger: quiet,
				MaxRequestDuration: 30 * time.Second, AbandonedHold: time.Second,
				Limiter: adaptive.Config{InitialLimit: 200, MinLimit: 200, MaxLimit: 1000, MaxQueued: 1000},
				Rate:    fleet.RateConfig{Window: sc.Window},
			}
			if way == RateLearned {
				cfg.Rate.Learn, cfg.Rate.Learner = true, sc.Learner
			}
			n, err := fleet.NewWithCoordinator(counting, cfg)
			if err != nil {
				return RateResult{}, err
			}
			if err := n.Start(ctx); err != nil {
				return RateResult{}, err
			}
			nodes = append(nodes, n)
			defer func() {
				stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
				defer cancel()
				_ = n.Stop(stopCtx)
			}()
			clients[i] = &http.Client{Transport: n.Transport(bases[i])}
		}
	case RateStatic, RatePerPod:
		div := int64(1)
		if way == RateStatic {
			div = int64(len(sc.Workers))
		}
		for i := range sc.Workers {
			p, err := pace.New(pace.Config{RequestRate: 1, TokenRate: 1, Burst: sc.Window / 60}, time.Now())
			if err != nil {
				return RateResult{}, err
			}
			setPacer(p, sc, sc.Quotas[0], div)
			pacers = append(pacers, p)
			clients[i] = &http.Client{Transport: &pacedTransport{pacer: p, base: bases[i]}}
		}
	}

	prov, err := sim.StartProvider(sim.ProviderConfig{
		Capacity:    sim.Fixed(100000),
		BaseLatency: sc.Latency,
		RateLimit: &sim.RateLimit{Window: sc.Window, Usage: true, Quota: []sim.QuotaStep{
			{At: 0, Quota: sc.Quotas[0]}, {At: sc.Phase, Quota: sc.Quotas[1]}}},
	})
	if err != nil {
		return RateResult{}, fmt.Errorf("bench: rate: %w", err)
	}
	defer prov.Close()
	start := time.Now()
	beats0 := counting.beats.Load()

	loadCtx, cancel := context.WithDeadline(ctx, start.Add(2*sc.Phase))
	defer cancel()
	var wg sync.WaitGroup
	// The quota changes: the operator of the given way sets the new one
	// when the provider's changes; the paced ways are set by hand.
	wg.Go(func() {
		sleepCtx(loadCtx, sc.Phase)
		if loadCtx.Err() != nil {
			return
		}
		switch way {
		case RateGiven:
			_ = setRates(loadCtx, pg, key, sc.perMinute(sc.Quotas[1]))
		case RateStatic:
			for _, p := range pacers {
				setPacer(p, sc, sc.Quotas[1], int64(len(sc.Workers)))
			}
		case RatePerPod:
			for _, p := range pacers {
				setPacer(p, sc, sc.Quotas[1], 1)
			}
		}
	})
	for i, w := range sc.Workers {
		for j := range w {
			rng := rand.New(rand.NewPCG(uint64(i), uint64(j)))
			wg.Go(func() { rateWorker(loadCtx, sc, clients[i], prov.URL(), i, rng) })
		}
	}
	wg.Wait()
	res := RateResult{Way: way, Elapsed: time.Since(start), Heartbeats: counting.beats.Load() - beats0}
	st := prov.RateStats()
	res.Windows, res.Accepted, res.Refused = st.Windows, st.Accepted, st.Refused
	for _, n := range nodes {
		res.FinalShares = append(res.FinalShares, n.Rates().Share.Requests)
	}
	return res, ctx.Err()
}

func setRates(ctx context.Context, a coord.Admin, key string, r coord.Rates) error {
	_, err := a.SetRates(ctx, key, coord.RatesChange{SetRequests: true, Requests: r.Requests, SetTokens: true, Tokens: r.Tokens})
	return err
}

// setPacer paces p to q ÷ div per window as a fleet node would: less
// what its bucket saves up and the default headroom, so that a window
// holds no more than q ÷ div.
func setPacer(p *pace.Pacer, sc RateScenario, q sim.RateQuota, div int64) {
	scale := 0.99 * float64(sc.Window) / float64(sc.Window+sc.Window/60) / sc.Window.Seconds() / float64(div)
	_ = p.SetRate(time.Now(), float64(q.Requests)*scale, float64(q.Tokens)*scale)
}

// pacedTransport paces requests with a node's own Pacer: the estimate
// before sending, settled by the provider's usage header.
type pacedTransport struct {
	pacer *pace.Pacer
	base  http.RoundTripper
}

func (t *pacedTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	ticket, err := t.pacer.Wait(req.Context(), fleet.TokensFrom(req.Context()))
	if err != nil {
		return nil, err
	}
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		return nil, err
	}
	if used, err := strconv.ParseInt(resp.Header.Get(sim.HeaderUsageTokens), 10, 64); err == nil {
		_ = t.pacer.Settle(time.Now(), ticket, used)
	} else if resp.StatusCode == http.StatusTooManyRequests {
		t.pacer.Cancel(time.Now(), ticket)
	}
	return resp, nil
}

// rateWorker sends one request at a time until ctx ends: a request costs
// a random number of tokens, is admitted with the scenario's estimate and
// settled by the provider's usage header; after a 429 the worker backs
// off 100 ms, as a client would.
func rateWorker(ctx context.Context, sc RateScenario, client *http.Client, url string, node int, rng *rand.Rand) {
	header := fmt.Sprintf("node-%d", node)
	for ctx.Err() == nil {
		cost := sc.Tokens/2 + rng.Int64N(sc.Tokens+1)
		req, err := http.NewRequestWithContext(fleet.WithTokens(ctx, sc.Tokens), http.MethodGet,
			url+"?tokens="+strconv.FormatInt(cost, 10), nil)
		if err != nil {
			panic(err) // the URL is ours
		}
		req.Header.Set(sim.DefaultClientHeader, header)
		resp, err := client.Do(req)
		if err != nil {
			sleepCtx(ctx, 10*time.Millisecond)
			continue
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		if used, err := strconv.ParseInt(resp.Header.Get(sim.HeaderUsageTokens), 10, 64); err == nil {
			_ = fleet.SettleTokens(resp, used)
		}
		resp.Body.Close()
		if resp.StatusCode == http.StatusTooManyRequests {
			sleepCtx(ctx, 100*time.Millisecond)
		}
	}
}
