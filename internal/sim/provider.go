package sim

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"
)

// DefaultClientHeader is the request header whose value keys the
// per-client counts in Stats.Clients.
const DefaultClientHeader = "X-Fleet-Node"

// Response headers set by the Provider on every accepted or rejected
// request, for tests and debugging.
const (
	// HeaderConcurrency carries the in-flight count the request saw on
	// arrival, itself included.
	HeaderConcurrency = "X-Sim-Concurrency"
	// HeaderLatency carries the latency assigned to an accepted request, as
	// a time.Duration string ("40ms").
	HeaderLatency = "X-Sim-Latency"
)

// ProviderConfig configures a Provider. Only Capacity is required; zero
// values of the other fields take the defaults stated on each.
type ProviderConfig struct {
	// Capacity is the hidden concurrency capacity (Fixed, Stepped or
	// FollowModel). Required.
	Capacity Capacity
	// BaseLatency is how long a request takes when the in-flight count on
	// its arrival, itself included, is k <= capacity c; above, it takes
	// BaseLatency·k/c. Must be >= 0. Defaults to 20ms.
	BaseLatency time.Duration
	// MaxLatency caps the latency of one request (it matters when the
	// capacity is 0 or tiny). Must be >= BaseLatency. Defaults to 10s or
	// BaseLatency, whichever is larger.
	MaxLatency time.Duration
	// Reject429 turns on 429 mode: a request arriving when the in-flight
	// count, itself included, would exceed the capacity is answered 429 at
	// once and never served or counted as in flight.
	Reject429 bool
	// RetryAfterSeconds is the Retry-After header value of a 429; 0 omits
	// the header. Must be >= 0.
	RetryAfterSeconds int
	// ClientHeader names the request header that keys Stats.Clients. A
	// request without it counts under "". Defaults to DefaultClientHeader.
	ClientHeader string
	// MaxStreamChunks is the largest N accepted in ?stream=N. Must be >= 0.
	// Defaults to 1000.
	MaxStreamChunks int
	// Clock is the time source for latencies, the capacity schedule and the
	// accounting. Defaults to RealClock.
	Clock Clock
	// RateLimit, when set, adds requests- and tokens-per-window quotas that
	// every request must pass before the concurrency capacity (see
	// RateLimit and Provider). Nil enforces none.
	RateLimit *RateLimit
}

// withDefaults returns cfg with zero fields filled in, or an error naming
// the first invalid field.
func (cfg ProviderConfig) withDefaults() (ProviderConfig, error) {
	if err := cfg.Capacity.validate(); err != nil {
		return cfg, err
	}
	switch {
	case cfg.BaseLatency < 0:
		return cfg, fmt.Errorf("sim: ProviderConfig.BaseLatency must be >= 0, got %v", cfg.BaseLatency)
	case cfg.MaxLatency < 0:
		return cfg, fmt.Errorf("sim: ProviderConfig.MaxLatency must be >= 0, got %v", cfg.MaxLatency)
	case cfg.RetryAfterSeconds < 0:
		return cfg, fmt.Errorf("sim: ProviderConfig.RetryAfterSeconds must be >= 0, got %d", cfg.RetryAfterSeconds)
	case cfg.MaxStreamChunks < 0:
		return cfg, fmt.Errorf("sim: ProviderConfig.MaxStreamChunks must be >= 0, got %d", cfg.MaxStreamChunks)
	}
	if cfg.BaseLatency == 0 {
		cfg.BaseLatency = 20 * time.Millisecond
	}
	if cfg.MaxLatency == 0 {
		cfg.MaxLatency = max(10*time.Second, cfg.BaseLatency)
	}
	if cfg.MaxLatency < cfg.BaseLatency {
		return cfg, fmt.Errorf("sim: ProviderConfig.MaxLatency must be >= BaseLatency (%v), got %v", cfg.BaseLatency, cfg.MaxLatency)
	}
	if cfg.ClientHeader == "" {
		cfg.ClientHeader = DefaultClientHeader
	}
	if cfg.MaxStreamChunks == 0 {
		cfg.MaxStreamChunks = 1000
	}
	if cfg.Clock == nil {
		cfg.Clock = RealClock{}
	}
	if cfg.RateLimit != nil {
		rl, err := cfg.RateLimit.withDefaults()
		if err != nil {
			return cfg, err
		}
		cfg.RateLimit = &rl
	}
	return cfg, nil
}

// Provider is a simulated upstream with a hidden concurrency capacity. It
// is an http.Handler: every request, on any path and with any method,
// occupies one unit of concurrency from arrival until its response is
// complete, and is answered after a latency fixed on arrival from the
// in-flight count k (itself included) and the capacity c then:
// BaseLatency when k <= c, BaseLatency·k/c above, at most MaxLatency.
//
// The query parameter ?stream=N (1 <= N <= MaxStreamChunks) asks for a
// streamed response: the status and headers are sent and flushed at once,
// then N lines ("chunk 1\n" ...) follow, one every latency/N, each flushed.
// The request holds its unit of concurrency until the last chunk is
// written, so a client that got the headers is still occupying the
// provider while it reads the body, as an LLM stream does. A client that
// closes the body early frees the unit when the provider notices
// (its next write or the connection's close), counted as Canceled. A stream
// cut short by Close ends with a broken connection, so its reader gets an
// error rather than a clean, short body; a plain request cut short gets 503.
//
// A Provider is safe for concurrent use. Build one with NewProvider (to
// mount it yourself) or StartProvider (its own loopback server).
type Provider struct {
	cfg   ProviderConfig
	clock Clock

	mu        sync.Mutex
	last      time.Time // accounting is integrated up to here
	capacity  float64
	steps     []Step // remaining Stepped stages, schedule origin start
	start     time.Time
	model     *Model
	secStart  time.Time // start of the model second being measured
	secBusy   int64     // in-flight integrated over the model second, request·nanoseconds
	modelStep int
	current   int
	maxConc   int
	successes int64
	rejected  int64
	canceled  int64
	overCap   time.Duration
	clients   map[string]*ClientStats
	closed    bool

	rate        *RateWindow // nil without ProviderConfig.RateLimit
	rateLimited int64
	rateTokens  int64

	handlers  sync.WaitGroup
	done      chan struct{}
	closeOnce sync.Once
	closeErr  error

	srv       *http.Server
	url       string
	serveDone chan struct{}
}

// NewProvider returns a Provider that is not listening; serve it with any
// http.Server. It returns an error naming the field when cfg is invalid.
// The capacity schedule starts at cfg.Clock's now.
func NewProvider(cfg ProviderConfig) (*Provider, error) {
	cfg, err := cfg.withDefaults()
	if err != nil {
		return nil, err
	}
	now := cfg.Clock.Now()
	p := &Provider{
		cfg:      cfg,
		clock:    cfg.Clock,
		last:     now,
		start:    now,
		secStart: now,
		clients:  make(map[string]*ClientStats),
		done:     make(chan struct{}),
	}
	switch c := cfg.Capacity; c.kind {
	case capacityFixed:
		p.capacity = float64(c.fixed)
	case capacityStepped:
		p.capacity = float64(c.steps[0].Capacity)
		p.steps = c.steps[1:]
	case capacityModel:
		p.model = c.model
		p.capacity = c.model.Capacity()
	}
	if cfg.RateLimit != nil {
		if p.rate, err = NewRateWindow(*cfg.RateLimit, now); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// StartProvider returns a Provider serving on its own HTTP server at
// 127.0.0.1 on a free port (see URL). Close stops it. It returns an error
// naming the field when cfg is invalid, or the listen error.
func StartProvider(cfg ProviderConfig) (*Provider, error) {
	p, err := NewProvider(cfg)
	if err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("sim: listen: %w", err)
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	p.url = "http://" + ln.Addr().String()
	p.serveDone = make(chan struct{})
	go func() {
		defer close(p.serveDone)
		_ = p.srv.Serve(ln) // returns http.ErrServerClosed after Close
	}()
	return p, nil
}

// URL returns the base URL ("http://127.0.0.1:PORT") of a provider built
// by StartProvider, or "" for one built by NewProvider.
func (p *Provider) URL() string { return p.url }

// Close aborts the requests in flight (they count as Canceled), stops the
// server StartProvider started and waits for every handler to return.
// Requests arriving afterwards get 503. It is safe to call more than once;
// later calls return the first call's error.
func (p *Provider) Close() error {
	p.closeOnce.Do(func() {
		p.mu.Lock()
		p.closed = true
		p.mu.Unlock()
		close(p.done)
		if p.srv != nil {
			ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
			if err := p.srv.Shutdown(ctx); err != nil {
				p.closeErr = fmt.Errorf("sim: close: %w", errors.Join(err, p.srv.Close()))
			}
			cancel()
			<-p.serveDone
		}
		p.handlers.Wait()
	})
	return p.closeErr
}

// SetCapacity replaces the capacity source with Fixed(n) from now on (a
// Stepped schedule or a followed model stops being consulted). It panics if
// n is negative.
func (p *Provider) SetCapacity(n int) {
	if n < 0 {
		panic(fmt.Sprintf("sim: Provider.SetCapacity called with negative capacity %d", n))
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advanceLocked(p.clock.Now())
	p.steps = nil
	p.model = nil
	p.capacity = float64(n)
}

// ServeHTTP serves one simulated request (see Provider). A malformed
// ?stream= or ?tokens= gets 400 and is not counted. With a RateLimit, a
// request that does not fit its quota gets 429 before it reaches the
// concurrency capacity.
func (p *Provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	chunks, err := p.parseStream(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	tokens, err := p.parseTokens(r)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if !p.enter() {
		http.Error(w, "sim: provider closed", http.StatusServiceUnavailable)
		return
	}
	defer p.handlers.Done()

	client := r.Header.Get(p.cfg.ClientHeader)
	if p.rate != nil && !p.admitRate(w, client, tokens) {
		return
	}
	k, latency, accepted := p.arrive(client)
	h := w.Header()
	h.Set(HeaderConcurrency, strconv.Itoa(k))
	if !accepted {
		if p.cfg.RetryAfterSeconds > 0 {
			h.Set("Retry-After", strconv.Itoa(p.cfg.RetryAfterSeconds))
		}
		http.Error(w, "sim: over capacity", http.StatusTooManyRequests)
		return
	}
	completed := false
	defer func() { p.depart(client, completed) }()
	h.Set(HeaderLatency, latency.String())
	h.Set("Content-Type", "text/plain; charset=utf-8")
	if p.rate != nil && p.cfg.RateLimit.Usage {
		h.Set(HeaderUsageTokens, strconv.FormatInt(tokens, 10))
	}

	ctx := r.Context()
	if chunks == 0 {
		if !p.wait(ctx, latency) {
			// The client is gone or the provider is closing; a client still
			// listening learns the request was not served.
			http.Error(w, "sim: request aborted", http.StatusServiceUnavailable)
			return
		}
		w.WriteHeader(http.StatusOK)
		_, _ = io.WriteString(w, "ok\n")
		completed = true
		return
	}
	flusher, _ := w.(http.Flusher)
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	per := latency / time.Duration(chunks)
	for i := 1; i <= chunks; i++ {
		d := per
		if i == chunks {
			d = latency - per*time.Duration(chunks-1)
		}
		if !p.wait(ctx, d) {
			// Abort the connection so a client still reading sees an error,
			// not a clean end of a short stream. net/http recovers this
			// panic silently; the deferred depart still runs.
			panic(http.ErrAbortHandler)
		}
		if _, err := fmt.Fprintf(w, "chunk %d\n", i); err != nil {
			return
		}
		if flusher != nil {
			flusher.Flush()
		}
	}
	completed = true
}

func (p *Provider) parseStream(r *http.Request) (int, error) {
	v := r.URL.Query().Get("stream")
	if v == "" {
		return 0, nil
	}
	n, err := strconv.Atoi(v)
	if err != nil || n < 1 || n > p.cfg.MaxStreamChunks {
		return 0, fmt.Errorf("sim: stream must be an integer in [1, %d], got %q", p.cfg.MaxStreamChunks, v)
	}
	return n, nil
}

// enter registers a handler unless the provider is closed.
func (p *Provider) enter() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.closed {
		return false
	}
	p.handlers.Add(1)
	return true
}

// wait holds the request for d on the provider's clock. It reports false
// if the client went away or the provider closed first.
func (p *Provider) wait(ctx context.Context, d time.Duration) bool {
	select {
	case <-p.clock.After(d):
		return true
	case <-ctx.Done():
		return false
	case <-p.done:
		return false
	}
}

// arrive accounts for a request's arrival. It returns the in-flight count
// the request saw (itself included), its latency, and whether it was
// accepted (false only in 429 mode).
func (p *Provider) arrive(client string) (k int, latency time.Duration, accepted bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advanceLocked(p.clock.Now())
	cs := p.clientLocked(client)
	k = p.current + 1
	if p.cfg.Reject429 && float64(k) > p.capacity {
		p.rejected++
		cs.Rejected++
		return k, 0, false
	}
	p.current = k
	p.maxConc = max(p.maxConc, k)
	cs.Current++
	cs.MaxConcurrency = max(cs.MaxConcurrency, cs.Current)
	return k, p.latencyLocked(k), true
}

func (p *Provider) latencyLocked(k int) time.Duration {
	if float64(k) <= p.capacity {
		return p.cfg.BaseLatency
	}
	if p.capacity <= 0 {
		return p.cfg.MaxLatency
	}
	l := float64(p.cfg.BaseLatency) * float64(k) / p.capacity
	if l >= float64(p.cfg.MaxLatency) {
		return p.cfg.MaxLatency
	}
	return time.Duration(math.Round(l))
}

func (p *Provider) depart(client string, completed bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.advanceLocked(p.clock.Now())
	p.current--
	cs := p.clients[client]
	cs.Current--
	if completed {
		p.successes++
		cs.Successes++
	} else {
		p.canceled++
		cs.Canceled++
	}
}
