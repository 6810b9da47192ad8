package bench

import (
	"context"
	"io"
	"net/http"
	"sync"
	"time"
)

// meter counts the fleet's attempted in-flight requests on every node
// together, integrates it exactly over time (event by event) and keeps the
// outcome counts. It is safe for concurrent use.
type meter struct {
	sc     FleetScenario
	now    func() time.Time
	steps  []time.Duration // offsets of the start and of the capacity steps
	drops  []time.Duration // offsets of the steps that lower the capacity
	bounds []time.Duration // where the peaks' rules change: steps, and the ends of their windows

	mu          sync.Mutex
	start       time.Time
	last        time.Time // the integrals run up to here
	cur         int
	area        float64 // ∫ in-flight dt since start, request·seconds
	overCap     time.Duration
	peak        int
	peakRatio   float64
	peakAt      time.Duration
	steadyRatio float64
	outerRatio  float64
	outerAt     time.Duration
	older       []int // per capacity drop: in flight now, sent before it
	carried     []int // per capacity drop: older at its first heartbeat's end; -1 until then
	series      []FleetSample

	sent, succeeded, rejected, failed int64
	nodeSucceeded                     []int64
	latencies                         []time.Duration
}

func newMeter(sc FleetScenario) *meter {
	m := &meter{sc: sc, now: time.Now, nodeSucceeded: make([]int64, sc.Nodes)}
	prev := 0
	for i, st := range sc.Steps() {
		m.steps = append(m.steps, st.At)
		m.bounds = append(m.bounds, st.At, st.At+sc.Settle)
		if i > 0 && st.Capacity < prev {
			m.drops = append(m.drops, st.At)
			m.bounds = append(m.bounds, st.At+sc.Heartbeat)
		}
		prev = st.Capacity
	}
	m.older = make([]int, len(m.drops))
	m.carried = make([]int, len(m.drops))
	for j := range m.carried {
		m.carried[j] = -1
	}
	return m
}

// begin sets the meter's time origin, the start of the capacity schedule.
func (m *meter) begin(start time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.start, m.last = start, start
}

// advanceLocked integrates the in-flight count up to now, splitting the
// interval at capacity steps and at the ends of the peaks' windows, where
// it also checks the peaks: a count that stays up while the capacity
// falls, or past a window's end, counts without a new request.
func (m *meter) advanceLocked(now time.Time) {
	for m.last.Before(now) {
		at := m.last.Sub(m.start)
		end := now
		for _, s := range m.bounds {
			if b := m.start.Add(s); s > at && b.Before(end) {
				end = b
			}
		}
		dt := end.Sub(m.last)
		m.area += float64(m.cur) * dt.Seconds()
		if m.cur > m.sc.CapacityAt(at) {
			m.overCap += dt
		}
		m.last = end
		for j, s := range m.drops {
			if m.carried[j] < 0 && !end.Before(m.start.Add(s+m.sc.Heartbeat)) {
				m.carried[j] = m.older[j]
			}
		}
		if end.Before(now) {
			m.notePeakLocked(end.Sub(m.start))
		}
	}
}

// notePeakLocked updates the peaks with the count in flight at at.
func (m *meter) notePeakLocked(at time.Duration) {
	ratio := float64(m.cur) / float64(max(m.sc.CapacityAt(at), 1))
	if ratio > m.peakRatio {
		m.peakRatio, m.peakAt = ratio, at
	}
	if !m.settling(at) {
		m.steadyRatio = max(m.steadyRatio, ratio)
	}
	if !m.justDropped(at) && ratio > m.outerRatio {
		m.outerRatio, m.outerAt = ratio, at
	}
}

// inc counts a request about to be sent and returns when, from the
// start, for dec.
func (m *meter) inc() time.Duration {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.advanceLocked(now)
	at := now.Sub(m.start)
	m.cur++
	m.sent++
	for j, s := range m.drops {
		if at < s {
			m.older[j]++
		}
	}
	m.peak = max(m.peak, m.cur)
	m.notePeakLocked(at)
	return at
}

// justDropped reports whether at lies in [s, s+Heartbeat) for a step s
// that lowers the capacity: the grace the fleet's peak target allows.
func (m *meter) justDropped(at time.Duration) bool {
	for _, s := range m.drops {
		if at >= s && at < s+m.sc.Heartbeat {
			return true
		}
	}
	return false
}

// settling reports whether at lies within sc.Settle after the start or a
// capacity step.
func (m *meter) settling(at time.Duration) bool {
	for _, s := range m.steps {
		if at >= s && at < s+m.sc.Settle {
			return true
		}
	}
	return false
}

// outcome is how a request ended.
type outcome int

const (
	outcomeOK outcome = iota
	outcomeRejected
	outcomeFailed
)

// dec counts the end of a request sent by node at sent (inc's result),
// with its round-trip time.
func (m *meter) dec(node int, sent time.Duration, o outcome, rtt time.Duration) {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.advanceLocked(now)
	m.cur--
	for j, s := range m.drops {
		if sent < s {
			m.older[j]--
		}
	}
	switch o {
	case outcomeOK:
		m.succeeded++
		m.nodeSucceeded[node]++
		m.latencies = append(m.latencies, rtt)
	case outcomeRejected:
		m.rejected++
	default:
		m.failed++
	}
}

// sampleLoop appends a FleetSample every sc.SampleEvery until ctx ends:
// the mean in-flight over the interval and what probe says.
func (m *meter) sampleLoop(ctx context.Context, probe func() (int, float64, uint64)) {
	t := time.NewTicker(m.sc.SampleEvery)
	defer t.Stop()
	m.mu.Lock()
	prevArea, prevAt := m.area, m.last
	prevOK, prevRej := m.succeeded, m.rejected
	m.mu.Unlock()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		lg, est, drops := probe()
		now := m.now()
		m.mu.Lock()
		m.advanceLocked(now)
		at := now.Sub(m.start)
		if dt := now.Sub(prevAt).Seconds(); dt > 0 && at <= m.sc.Duration {
			m.series = append(m.series, FleetSample{
				At:           at,
				Capacity:     m.sc.CapacityAt(at - time.Nanosecond),
				Inflight:     (m.area - prevArea) / dt,
				LGlobal:      lg,
				MeanEstimate: est,
				Drops:        drops,
				Succeeded:    m.succeeded - prevOK,
				Rejected:     m.rejected - prevRej,
			})
		}
		prevArea, prevAt = m.area, now
		prevOK, prevRej = m.succeeded, m.rejected
		m.mu.Unlock()
	}
}

// result returns the measurements of the run so far.
func (m *meter) result(way FleetWay, sc FleetScenario) FleetResult {
	now := m.now()
	m.mu.Lock()
	defer m.mu.Unlock()
	m.advanceLocked(now)
	return FleetResult{
		Way:             way,
		Scenario:        sc,
		Elapsed:         min(now.Sub(m.start), sc.Duration),
		Sent:            m.sent,
		Succeeded:       m.succeeded,
		Rejected:        m.rejected,
		Failed:          m.failed,
		NodeSucceeded:   append([]int64(nil), m.nodeSucceeded...),
		Latencies:       append([]time.Duration(nil), m.latencies...),
		PeakInflight:    m.peak,
		PeakRatio:       m.peakRatio,
		PeakAt:          m.peakAt,
		SteadyPeakRatio: m.steadyRatio,
		OuterPeakRatio:  m.outerRatio,
		OuterPeakAt:     m.outerAt,
		CarriedRatio:    m.carriedRatioLocked(),
		OverCapacity:    m.overCap,
		Series:          append([]FleetSample(nil), m.series...),
	}
}

// carriedRatioLocked is FleetResult.CarriedRatio: the largest, over the
// capacity drops whose first heartbeat has ended, of the requests sent
// before the drop and still in flight then, over the capacity then.
func (m *meter) carriedRatioLocked() float64 {
	r := 0.0
	for j, s := range m.drops {
		if m.carried[j] >= 0 {
			r = max(r, float64(m.carried[j])/float64(max(m.sc.CapacityAt(s), 1)))
		}
	}
	return r
}

// countingTransport is the lowest layer of every node's client: it counts
// a request in the meter from just before it is sent until its body is
// closed (or it fails), and classifies its outcome.
type countingTransport struct {
	base  http.RoundTripper
	meter *meter
	node  int
}

func (t *countingTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	sent := t.meter.inc()
	start := time.Now()
	resp, err := t.base.RoundTrip(req)
	if err != nil {
		t.meter.dec(t.node, sent, outcomeFailed, 0)
		return nil, err
	}
	o := outcomeFailed
	switch resp.StatusCode {
	case http.StatusOK:
		o = outcomeOK
	case http.StatusTooManyRequests:
		o = outcomeRejected
	}
	resp.Body = &countedBody{ReadCloser: resp.Body, t: t, o: o, sent: sent, start: start}
	return resp, nil
}

// countedBody ends its request's count when the body is read to its end
// or closed, whichever comes first (fleet.Transport frees its slot at the
// end of the body, so the count must end no later). A 200 whose body
// could not be read to its end counts as failed.
type countedBody struct {
	io.ReadCloser
	t     *countingTransport
	o     outcome
	sent  time.Duration // the meter's offset of the send
	start time.Time
	ended bool
}

func (b *countedBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	switch {
	case err == io.EOF:
		b.end(b.o)
	case err != nil:
		b.end(outcomeFailed)
	}
	return n, err
}

func (b *countedBody) Close() error {
	err := b.ReadCloser.Close()
	if b.o == outcomeOK {
		b.end(outcomeFailed) // closed before its end
	} else {
		b.end(b.o)
	}
	return err
}

func (b *countedBody) end(o outcome) {
	if b.ended {
		return
	}
	b.ended = true
	b.t.meter.dec(b.t.node, b.sent, o, time.Since(b.start))
}
