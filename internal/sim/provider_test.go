package sim

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// waitTimeout bounds every wait for a handler to reach a state.
const waitTimeout = 5 * time.Second

var epoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

func startProvider(t *testing.T, cfg ProviderConfig) *Provider {
	t.Helper()
	p, err := StartProvider(cfg)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, p.Close()) })
	return p
}

// newClient returns a client whose idle connections are closed at cleanup
// (so goleak sees no transport goroutines) and whose requests are bounded.
func newClient(t *testing.T) *http.Client {
	t.Helper()
	tr := &http.Transport{MaxIdleConnsPerHost: 64}
	t.Cleanup(tr.CloseIdleConnections)
	return &http.Client{Transport: tr, Timeout: 30 * time.Second}
}

type result struct {
	status      int
	body        string
	concurrency int
	latency     time.Duration
	retryAfter  string
	err         error
}

// get sends one request and reads the whole response.
func get(client *http.Client, url, node string) result {
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, url, nil)
	if err != nil {
		return result{err: err}
	}
	if node != "" {
		req.Header.Set(DefaultClientHeader, node)
	}
	resp, err := client.Do(req)
	if err != nil {
		return result{err: err}
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	r := result{status: resp.StatusCode, body: string(body), err: err, retryAfter: resp.Header.Get("Retry-After")}
	r.concurrency, _ = strconv.Atoi(resp.Header.Get(HeaderConcurrency))
	if l := resp.Header.Get(HeaderLatency); l != "" {
		r.latency, _ = time.ParseDuration(l)
	}
	return r
}

// getAsync sends get in a goroutine; the result arrives on the channel.
func getAsync(client *http.Client, url, node string) <-chan result {
	ch := make(chan result, 1)
	go func() { ch <- get(client, url, node) }()
	return ch
}

func receive(t *testing.T, ch <-chan result) result {
	t.Helper()
	select {
	case r := <-ch:
		require.NoError(t, r.err)
		return r
	case <-time.After(waitTimeout):
		require.FailNow(t, "no response in time")
		return result{}
	}
}

// waitUntil polls cond, bounded by waitTimeout.
func waitUntil(t *testing.T, cond func() bool, msg string) {
	t.Helper()
	require.Eventually(t, cond, waitTimeout, time.Millisecond, msg)
}

// holdOne sends a request to a ManualClock provider and returns once the
// handler is in flight and waiting on the clock, so arrival order is
// deterministic.
func holdOne(t *testing.T, p *Provider, clock *ManualClock, client *http.Client, node string) <-chan result {
	t.Helper()
	cur, waiters := p.Stats().Current, clock.Waiters()
	ch := getAsync(client, p.URL(), node)
	waitUntil(t, func() bool { return p.Stats().Current == cur+1 && clock.Waiters() == waiters+1 }, "request in flight")
	return ch
}

func TestProviderConfigValidate(t *testing.T) {
	t.Parallel()
	tests := []struct {
		name string
		cfg  ProviderConfig
		want string
	}{
		{"no capacity", ProviderConfig{}, "ProviderConfig.Capacity"},
		{"negative fixed", ProviderConfig{Capacity: Fixed(-1)}, "ProviderConfig.Capacity"},
		{"empty stepped", ProviderConfig{Capacity: Stepped(nil)}, "ProviderConfig.Capacity"},
		{"stepped not at 0", ProviderConfig{Capacity: Stepped([]Step{{At: time.Second, Capacity: 1}})}, "start At 0"},
		{"stepped not increasing", ProviderConfig{Capacity: Stepped([]Step{{0, 1}, {time.Second, 2}, {time.Second, 3}})}, "step 2 At"},
		{"stepped negative", ProviderConfig{Capacity: Stepped([]Step{{0, -1}})}, "step 0 capacity"},
		{"nil model", ProviderConfig{Capacity: FollowModel(nil)}, "FollowModel"},
		{"negative base", ProviderConfig{Capacity: Fixed(1), BaseLatency: -1}, "ProviderConfig.BaseLatency"},
		{"max below base", ProviderConfig{Capacity: Fixed(1), BaseLatency: time.Second, MaxLatency: time.Millisecond}, "ProviderConfig.MaxLatency"},
		{"negative retry-after", ProviderConfig{Capacity: Fixed(1), RetryAfterSeconds: -1}, "ProviderConfig.RetryAfterSeconds"},
		{"negative chunks", ProviderConfig{Capacity: Fixed(1), MaxStreamChunks: -1}, "ProviderConfig.MaxStreamChunks"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			_, err := NewProvider(tt.cfg)
			require.ErrorContains(t, err, tt.want)
		})
	}
}

// TestProviderAccountsConcurrencyExactly holds N clients in flight at once
// on a manual clock: the maximum concurrency, the per-client counts and the
// latency each request was given are exact.
func TestProviderAccountsConcurrencyExactly(t *testing.T) {
	t.Parallel()
	clock := NewManualClock(epoch)
	const capacity, n = 4, 10
	base := time.Second
	p := startProvider(t, ProviderConfig{Capacity: Fixed(capacity), BaseLatency: base, Clock: clock})
	client := newClient(t)

	var pending []<-chan result
	for i := range n {
		pending = append(pending, holdOne(t, p, clock, client, fmt.Sprintf("node-%d", i)))
	}
	s := p.Stats()
	require.Equal(t, n, s.Current)
	require.Equal(t, n, s.MaxConcurrency)
	require.Len(t, s.Clients, n)
	for _, c := range s.Clients {
		require.Equal(t, ClientStats{Current: 1, MaxConcurrency: 1}, c)
	}

	clock.Advance(base * n / capacity) // the longest latency, 2.5s
	for i, ch := range pending {
		r := receive(t, ch)
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, "ok\n", r.body)
		k := i + 1
		require.Equal(t, k, r.concurrency, "request %d saw itself and the earlier ones", i)
		// Latency grows above capacity: base for k <= c, base·k/c above.
		want := base
		if k > capacity {
			want = base * time.Duration(k) / capacity
		}
		require.Equal(t, want, r.latency, "latency of arrival %d", k)
	}
	waitUntil(t, func() bool { return p.Stats().Current == 0 }, "all departed")
	s = p.Stats()
	require.Equal(t, int64(n), s.Successes)
	require.Equal(t, n, s.MaxConcurrency)
	require.Zero(t, s.Rejected+s.Canceled)
	for _, c := range s.Clients {
		require.Equal(t, ClientStats{Successes: 1, MaxConcurrency: 1}, c)
	}
}

// TestProviderOverCapacityTime integrates the time spent over capacity on a
// manual clock, including a SetCapacity that drops capacity mid-request.
func TestProviderOverCapacityTime(t *testing.T) {
	t.Parallel()
	clock := NewManualClock(epoch)
	p := startProvider(t, ProviderConfig{Capacity: Fixed(1), BaseLatency: time.Second, Clock: clock})
	client := newClient(t)

	a := holdOne(t, p, clock, client, "a") // k=1: 1s
	b := holdOne(t, p, clock, client, "b") // k=2 > 1: 2s, over capacity from now
	require.Equal(t, time.Duration(0), p.Stats().OverCapacity)

	clock.Advance(500 * time.Millisecond)
	require.Equal(t, 500*time.Millisecond, p.Stats().OverCapacity, "integrated up to now")

	clock.Advance(500 * time.Millisecond)
	require.Equal(t, time.Second, receive(t, a).latency)
	waitUntil(t, func() bool { return p.Stats().Current == 1 }, "a departed")
	require.Equal(t, time.Second, p.Stats().OverCapacity)

	clock.Advance(time.Second)
	require.Equal(t, 2*time.Second, receive(t, b).latency)
	waitUntil(t, func() bool { return p.Stats().Current == 0 }, "b departed")
	clock.Advance(5 * time.Second)
	require.Equal(t, time.Second, p.Stats().OverCapacity, "nothing in flight, nothing over")

	// A request within capacity, then the capacity drops under it.
	c := holdOne(t, p, clock, client, "c")
	p.SetCapacity(0)
	require.Equal(t, 0.0, p.Stats().Capacity)
	clock.Advance(time.Second)
	require.Equal(t, http.StatusOK, receive(t, c).status)
	waitUntil(t, func() bool { return p.Stats().Current == 0 }, "c departed")
	require.Equal(t, 2*time.Second, p.Stats().OverCapacity)
}

func TestProviderRejects429(t *testing.T) {
	t.Parallel()
	for _, retryAfter := range []int{0, 3} {
		t.Run(fmt.Sprintf("retry-after=%d", retryAfter), func(t *testing.T) {
			t.Parallel()
			clock := NewManualClock(epoch)
			p := startProvider(t, ProviderConfig{
				Capacity: Fixed(2), BaseLatency: time.Second, Reject429: true,
				RetryAfterSeconds: retryAfter, Clock: clock,
			})
			client := newClient(t)
			a := holdOne(t, p, clock, client, "a")
			b := holdOne(t, p, clock, client, "b")

			// The third arrival would make 3 > 2: rejected at once, without
			// the clock moving, and never counted in flight.
			r := get(client, p.URL(), "c")
			require.NoError(t, r.err)
			require.Equal(t, http.StatusTooManyRequests, r.status)
			require.Equal(t, 3, r.concurrency)
			if retryAfter == 0 {
				require.Empty(t, r.retryAfter)
			} else {
				require.Equal(t, strconv.Itoa(retryAfter), r.retryAfter)
			}
			s := p.Stats()
			require.Equal(t, int64(1), s.Rejected)
			require.Equal(t, 2, s.Current)
			require.Equal(t, 2, s.MaxConcurrency)
			require.Equal(t, ClientStats{Rejected: 1}, s.Clients["c"])

			clock.Advance(time.Second)
			require.Equal(t, http.StatusOK, receive(t, a).status)
			require.Equal(t, http.StatusOK, receive(t, b).status)
			waitUntil(t, func() bool { return p.Stats().Current == 0 }, "all departed")
			s = p.Stats()
			require.Equal(t, int64(2), s.Successes)
			require.Equal(t, time.Duration(0), s.OverCapacity)
		})
	}
}

// TestProviderConcurrentClientsRealClock runs many real concurrent clients
// on the real clock in 429 mode: every request is accounted once, the
// per-client counts add up, and in-flight never exceeds capacity.
func TestProviderConcurrentClientsRealClock(t *testing.T) {
	t.Parallel()
	const capacity, clients, perClient = 4, 16, 5
	p := startProvider(t, ProviderConfig{Capacity: Fixed(capacity), BaseLatency: 20 * time.Millisecond, Reject429: true, RetryAfterSeconds: 1})
	client := newClient(t)

	var wg sync.WaitGroup
	var mu sync.Mutex
	statuses := map[int]int{}
	for i := range clients {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for range perClient {
				r := get(client, p.URL(), fmt.Sprintf("node-%d", i))
				mu.Lock()
				if r.err != nil {
					statuses[-1]++
				} else {
					statuses[r.status]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()

	s := p.Stats()
	require.Zero(t, statuses[-1], "transport errors")
	require.Equal(t, clients*perClient, statuses[http.StatusOK]+statuses[http.StatusTooManyRequests])
	require.Equal(t, int64(statuses[http.StatusOK]), s.Successes)
	require.Equal(t, int64(statuses[http.StatusTooManyRequests]), s.Rejected)
	require.Zero(t, s.Canceled)
	require.Zero(t, s.Current)
	require.LessOrEqual(t, s.MaxConcurrency, capacity)
	require.GreaterOrEqual(t, s.MaxConcurrency, 1)
	require.Equal(t, time.Duration(0), s.OverCapacity)
	require.Len(t, s.Clients, clients)
	for name, c := range s.Clients {
		require.Equal(t, int64(perClient), c.Successes+c.Rejected, name)
		require.LessOrEqual(t, c.MaxConcurrency, 1, "each client sends sequentially")
	}
}

// TestProviderLatencyGrowsRealClock checks the latency gradient end to end
// on the real clock: requests that arrive over capacity take measurably
// longer than base.
func TestProviderLatencyGrowsRealClock(t *testing.T) {
	t.Parallel()
	const base = 20 * time.Millisecond
	p := startProvider(t, ProviderConfig{Capacity: Fixed(1), BaseLatency: base})
	client := newClient(t)

	start := time.Now()
	solo := get(client, p.URL(), "")
	require.NoError(t, solo.err)
	require.Equal(t, base, solo.latency)
	require.GreaterOrEqual(t, time.Since(start), base)

	const n = 6
	var pending []<-chan result
	for range n {
		pending = append(pending, getAsync(client, p.URL(), ""))
	}
	var longest time.Duration
	for _, ch := range pending {
		r := receive(t, ch)
		require.Equal(t, http.StatusOK, r.status)
		require.Equal(t, base*time.Duration(max(1, r.concurrency)), r.latency, "base·k/c with c = 1")
		longest = max(longest, r.latency)
	}
	require.Greater(t, longest, base, "someone arrived over capacity")
	require.Greater(t, p.Stats().MaxConcurrency, 1)
}

// TestProviderStreamHoldsConcurrency checks that a streamed response holds
// its unit of concurrency while the client reads the body, not just until
// the headers.
func TestProviderStreamHoldsConcurrency(t *testing.T) {
	t.Parallel()
	clock := NewManualClock(epoch)
	p := startProvider(t, ProviderConfig{Capacity: Fixed(5), BaseLatency: 300 * time.Millisecond, Clock: clock})
	client := newClient(t)

	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, p.URL()+"/v1/chat?stream=3", nil)
	require.NoError(t, err)
	resp, err := client.Do(req) // the headers come at once, before any latency
	require.NoError(t, err)
	defer resp.Body.Close()
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, "300ms", resp.Header.Get(HeaderLatency))
	require.Equal(t, 1, p.Stats().Current, "holding the body holds the concurrency")

	lines := bufio.NewReader(resp.Body)
	for i := 1; i <= 3; i++ {
		waitUntil(t, func() bool { return clock.Waiters() == 1 }, "handler waiting for the next chunk")
		clock.Advance(100 * time.Millisecond)
		line, err := lines.ReadString('\n')
		require.NoError(t, err)
		require.Equal(t, fmt.Sprintf("chunk %d\n", i), line)
		if i < 3 {
			require.Equal(t, 1, p.Stats().Current, "still in flight after chunk %d", i)
		}
	}
	_, err = lines.ReadByte()
	require.ErrorIs(t, err, io.EOF)
	s := p.Stats()
	require.Equal(t, 0, s.Current, "released by the time the body hits EOF")
	require.Equal(t, int64(1), s.Successes)
}

func TestProviderStreamClosedEarlyIsCanceled(t *testing.T) {
	t.Parallel()
	clock := NewManualClock(epoch)
	p := startProvider(t, ProviderConfig{Capacity: Fixed(5), BaseLatency: time.Second, Clock: clock})
	client := newClient(t)

	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, p.URL()+"/?stream=4", nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	require.Equal(t, 1, p.Stats().Current)
	require.NoError(t, resp.Body.Close()) // unread body: the transport drops the connection

	waitUntil(t, func() bool { return p.Stats().Current == 0 }, "provider notices the client left")
	s := p.Stats()
	require.Equal(t, int64(1), s.Canceled)
	require.Zero(t, s.Successes)
}

func TestProviderBadStreamParameter(t *testing.T) {
	t.Parallel()
	p := startProvider(t, ProviderConfig{Capacity: Fixed(1), MaxStreamChunks: 10})
	client := newClient(t)
	for _, q := range []string{"0", "-1", "11", "x"} {
		r := get(client, p.URL()+"/?stream="+q, "")
		require.NoError(t, r.err)
		require.Equal(t, http.StatusBadRequest, r.status, q)
	}
	require.Equal(t, Stats{Clients: map[string]ClientStats{}, Capacity: 1}, p.Stats(), "bad requests are not counted")
}

func TestProviderSteppedCapacity(t *testing.T) {
	t.Parallel()
	clock := NewManualClock(epoch)
	p := startProvider(t, ProviderConfig{
		Capacity:    Stepped([]Step{{0, 2}, {time.Second, 5}, {2 * time.Second, 1}}),
		BaseLatency: 10 * time.Second, Reject429: true, Clock: clock,
	})
	client := newClient(t)
	var held []<-chan result

	require.Equal(t, 2.0, p.Stats().Capacity)
	held = append(held, holdOne(t, p, clock, client, ""), holdOne(t, p, clock, client, ""))
	require.Equal(t, http.StatusTooManyRequests, get(client, p.URL(), "").status)

	clock.Advance(time.Second) // exactly at the step
	require.Equal(t, 5.0, p.Stats().Capacity)
	for range 3 {
		held = append(held, holdOne(t, p, clock, client, ""))
	}
	require.Equal(t, http.StatusTooManyRequests, get(client, p.URL(), "").status)

	clock.Advance(999 * time.Millisecond)
	require.Equal(t, 5.0, p.Stats().Capacity)
	require.Equal(t, time.Duration(0), p.Stats().OverCapacity)
	clock.Advance(time.Millisecond)
	require.Equal(t, 1.0, p.Stats().Capacity, "capacity drops under the 5 in flight")
	clock.Advance(1500 * time.Millisecond)
	s := p.Stats()
	require.Equal(t, 1500*time.Millisecond, s.OverCapacity)
	require.Equal(t, int64(2), s.Rejected)
	require.Equal(t, 5, s.MaxConcurrency)

	clock.Advance(20 * time.Second)
	for _, ch := range held {
		require.Equal(t, http.StatusOK, receive(t, ch).status)
	}
	waitUntil(t, func() bool { return p.Stats().Current == 0 }, "all departed")
}

// TestProviderFollowModel checks that the model steps once per clock second
// with the time-weighted mean concurrency of that second.
func TestProviderFollowModel(t *testing.T) {
	t.Parallel()
	cfg := PublishedModelConfig()
	cfg.InitialCapacity, cfg.MeanCapacity = 1, 1
	cfg.Volatility, cfg.LatencyNoise = 0, 0
	model, err := NewModel(cfg, 1)
	require.NoError(t, err)
	reference, err := NewModel(cfg, 1)
	require.NoError(t, err)

	clock := NewManualClock(epoch)
	// MaxLatency = BaseLatency: every request takes exactly 500ms.
	p := startProvider(t, ProviderConfig{
		Capacity: FollowModel(model), BaseLatency: 500 * time.Millisecond,
		MaxLatency: 500 * time.Millisecond, Clock: clock,
	})
	client := newClient(t)

	// 4 requests for the first half second: mean concurrency 2 over it.
	var held []<-chan result
	for range 4 {
		held = append(held, holdOne(t, p, clock, client, ""))
	}
	clock.Advance(500 * time.Millisecond)
	for _, ch := range held {
		require.Equal(t, http.StatusOK, receive(t, ch).status)
	}
	waitUntil(t, func() bool { return p.Stats().Current == 0 }, "all departed")
	require.Zero(t, p.Stats().ModelSteps)

	clock.Advance(499 * time.Millisecond)
	require.Zero(t, p.Stats().ModelSteps)
	clock.Advance(time.Millisecond)
	s := p.Stats()
	require.Equal(t, 1, s.ModelSteps)
	want := reference.Step(2).NextCapacity
	require.Less(t, want, 1.0, "k = 2 against c = 1 overloads the model")
	require.InDelta(t, want, s.Capacity, 1e-12)
	require.Equal(t, 500*time.Millisecond, s.OverCapacity, "4 > 1 for the first 500ms")

	// An idle second: k = 0.
	clock.Advance(time.Second)
	s = p.Stats()
	require.Equal(t, 2, s.ModelSteps)
	require.InDelta(t, reference.Step(0).NextCapacity, s.Capacity, 1e-12)

	// SetCapacity stops following the model.
	p.SetCapacity(7)
	clock.Advance(3 * time.Second)
	s = p.Stats()
	require.Equal(t, 2, s.ModelSteps)
	require.Equal(t, 7.0, s.Capacity)
}

func TestProviderReset(t *testing.T) {
	t.Parallel()
	clock := NewManualClock(epoch)
	p := startProvider(t, ProviderConfig{Capacity: Fixed(1), BaseLatency: time.Second, Clock: clock})
	client := newClient(t)

	first := holdOne(t, p, clock, client, "a")
	clock.Advance(time.Second)
	receive(t, first)
	waitUntil(t, func() bool { return p.Stats().Current == 0 }, "departed")
	a := holdOne(t, p, clock, client, "a")
	b := holdOne(t, p, clock, client, "b") // 2s, over capacity
	clock.Advance(500 * time.Millisecond)

	p.Reset()
	s := p.Stats()
	require.Zero(t, s.Successes+s.Rejected+s.Canceled)
	require.Equal(t, time.Duration(0), s.OverCapacity)
	require.Equal(t, 2, s.Current)
	require.Equal(t, 2, s.MaxConcurrency, "restarts from what is still in flight")
	require.Equal(t, ClientStats{Current: 1, MaxConcurrency: 1}, s.Clients["a"])

	clock.Advance(1500 * time.Millisecond) // both depart now: 2 > 1 for the whole 1.5s
	receive(t, a)
	receive(t, b)
	waitUntil(t, func() bool { return p.Stats().Current == 0 }, "departed")
	s = p.Stats()
	require.Equal(t, int64(2), s.Successes)
	require.Equal(t, 1500*time.Millisecond, s.OverCapacity)
}

// TestProviderCloseAbortsInFlight checks that Close does not wait for held
// requests: they are cut short and counted as Canceled.
func TestProviderCloseAbortsInFlight(t *testing.T) {
	t.Parallel()
	clock := NewManualClock(epoch)
	p, err := NewProvider(ProviderConfig{Capacity: Fixed(1), BaseLatency: time.Hour, MaxLatency: time.Hour, Clock: clock})
	require.NoError(t, err)
	srv := httptest.NewServer(p)
	t.Cleanup(srv.Close)
	client := newClient(t)
	require.Empty(t, p.URL(), "not started by StartProvider")

	plain := getAsync(client, srv.URL, "")
	waitUntil(t, func() bool { return p.Stats().Current == 1 }, "in flight")
	req, err := http.NewRequestWithContext(context.Background(), http.MethodGet, srv.URL+"/?stream=2", nil)
	require.NoError(t, err)
	resp, err := client.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()

	require.NoError(t, p.Close())
	require.NoError(t, p.Close(), "idempotent")
	require.Equal(t, http.StatusServiceUnavailable, receive(t, plain).status)
	_, err = io.ReadAll(resp.Body)
	require.Error(t, err, "a cut stream is an error, not a clean short body")

	s := p.Stats()
	require.Equal(t, int64(2), s.Canceled)
	require.Zero(t, s.Current)
	require.Equal(t, http.StatusServiceUnavailable, get(client, srv.URL, "").status, "closed provider refuses")
}
