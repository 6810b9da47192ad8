package chaos

import (
	"bufio"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// provider is the upstream the fleet shares, measured from outside: a request
// is in flight from the moment its handler starts until the handler returns,
// whether or not the client is still there. Every admission that takes the
// count above the key's max is a violation, recorded in the ledger. It
// enforces nothing (no 429s): it only counts.
type provider struct {
	max       int64
	streamMin time.Duration // requests at least this long are streams
	ledger    *ledger
	srv       *http.Server
	url       string

	inflight atomic.Int64
	peak     atomic.Int64
	served   atomic.Int64

	mu      sync.Mutex
	streams map[string]int // streams in flight per node id
}

func startProvider(max int, streamMin time.Duration, l *ledger) (*provider, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("provider: %w", err)
	}
	p := &provider{
		max:       int64(max),
		streamMin: streamMin,
		ledger:    l,
		url:       "http://" + ln.Addr().String() + "/",
		streams:   map[string]int{},
	}
	p.srv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := p.srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			panic(err)
		}
	}()
	return p, nil
}

// ServeHTTP serves ?ms=<duration>, returning only once the duration has
// passed, whether or not the client is still there. A stream (at least
// streamMin) sends its headers at once, then a few flushed chunks spread
// over the duration, ignoring write errors; any shorter request is
// answered whole at its end, as a completion without streaming is, so a
// connection cut before then leaves the client without a response while
// the provider goes on serving it.
func (p *provider) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	start := time.Now()
	v := p.inflight.Add(1)
	defer p.inflight.Add(-1)
	for peak := p.peak.Load(); v > peak && !p.peak.CompareAndSwap(peak, v); peak = p.peak.Load() {
	}
	if v > p.max {
		p.ledger.violation(start, v)
	}
	ms, _ := strconv.Atoi(r.URL.Query().Get("ms"))
	d := time.Duration(ms) * time.Millisecond
	if node := r.URL.Query().Get("node"); d >= p.streamMin && node != "" {
		p.mu.Lock()
		p.streams[node]++
		p.mu.Unlock()
		defer func() {
			p.mu.Lock()
			p.streams[node]--
			p.mu.Unlock()
		}()
	}

	w.Header().Set("Content-Type", "text/plain")
	if d < p.streamMin {
		time.Sleep(time.Until(start.Add(d)))
		_, _ = w.Write([]byte("done\n"))
		p.served.Add(1)
		return
	}
	flusher, _ := w.(http.Flusher)
	w.WriteHeader(http.StatusOK)
	if flusher != nil {
		flusher.Flush()
	}
	const chunks = 4
	for i := 1; i <= chunks; i++ {
		time.Sleep(time.Until(start.Add(d * time.Duration(i) / chunks)))
		_, _ = w.Write([]byte("chunk\n"))
		if flusher != nil {
			flusher.Flush()
		}
	}
	p.served.Add(1)
}

// streamsOf returns how many streams of node are in flight.
func (p *provider) streamsOf(node string) int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.streams[node]
}

// close stops the server and waits for the handlers still running, whose
// clients were killed, to return.
func (p *provider) close() error {
	err := p.srv.Close()
	deadline := time.Now().Add(10 * time.Second)
	for p.inflight.Load() > 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	return err
}

// injection is one fault injected. Its window runs from start until tail
// after it healed: a fault's effects on the provider can outlast it by a
// lease plus the longest request.
type injection struct {
	id     int
	kind   string
	target string
	start  time.Time
	healed time.Time
	note   string

	violations int64 // admissions above the max inside the window
	episodes   int   // episodes that began inside the window
	alone      int   // episodes that began inside this window and no other
	peak       int64 // most in flight at a violation inside the window
}

// episode is a run of violations less than episodeGap apart.
type episode struct {
	start, last time.Time
	count       int64
	peak        int64
	windows     []string // the fault windows open when it began
}

const episodeGap = 100 * time.Millisecond

// violationRec is one admission above the max.
type violationRec struct {
	at      time.Time
	value   int64
	windows []string
}

// ledger records injections and attributes each violation to every fault
// window open at its time.
type ledger struct {
	tail  time.Duration
	begun time.Time
	logf  func(format string, args ...any)

	mu           sync.Mutex
	injections   []*injection
	episodes     []*episode
	records      []violationRec
	violations   int64
	unattributed int64
}

// maxRecords bounds the violations kept one by one.
const maxRecords = 100_000

func newLedger(tail time.Duration, logf func(string, ...any)) *ledger {
	return &ledger{tail: tail, begun: time.Now(), logf: logf}
}

// since formats t as an offset from the ledger's start.
func (l *ledger) since(t time.Time) string {
	return fmt.Sprintf("+%6.2fs", t.Sub(l.begun).Seconds())
}

func (l *ledger) begin(kind, target string) *injection {
	l.mu.Lock()
	inj := &injection{id: len(l.injections) + 1, kind: kind, target: target, start: time.Now()}
	l.injections = append(l.injections, inj)
	l.mu.Unlock()
	l.logf("%s fault #%d %s on %s", l.since(inj.start), inj.id, kind, target)
	return inj
}

func (l *ledger) heal(inj *injection, format string, args ...any) {
	now := time.Now()
	note := fmt.Sprintf(format, args...)
	l.mu.Lock()
	inj.healed = now
	inj.note = note
	l.mu.Unlock()
	l.logf("%s healed #%d %s on %s after %.2fs %s", l.since(now), inj.id, inj.kind, inj.target,
		now.Sub(inj.start).Seconds(), note)
}

// count returns how many faults were injected.
func (l *ledger) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.injections)
}

// countKind returns how many faults of kind were injected.
func (l *ledger) countKind(kind string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, inj := range l.injections {
		if inj.kind == kind {
			n++
		}
	}
	return n
}

// waitQuiet waits until every injection has healed and its window has
// closed.
func (l *ledger) waitQuiet() {
	for {
		l.mu.Lock()
		var until time.Time
		quiet := true
		for _, inj := range l.injections {
			if inj.healed.IsZero() {
				quiet = false
			} else if end := inj.healed.Add(l.tail); end.After(until) {
				until = end
			}
		}
		l.mu.Unlock()
		if quiet && !time.Now().Before(until) {
			return
		}
		time.Sleep(max(time.Until(until), 20*time.Millisecond))
	}
}

func (l *ledger) open(inj *injection, at time.Time) bool {
	return !at.Before(inj.start) && (inj.healed.IsZero() || !at.After(inj.healed.Add(l.tail)))
}

func (l *ledger) violation(at time.Time, v int64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.violations++
	var ep *episode
	if n := len(l.episodes); n > 0 && at.Sub(l.episodes[n-1].last) < episodeGap {
		ep = l.episodes[n-1]
	} else {
		ep = &episode{start: at}
		l.episodes = append(l.episodes, ep)
	}
	ep.last = at
	ep.count++
	ep.peak = max(ep.peak, v)
	var open []*injection
	var windows []string
	for _, inj := range l.injections {
		if l.open(inj, at) {
			open = append(open, inj)
			windows = append(windows, fmt.Sprintf("#%d %s", inj.id, inj.kind))
		}
	}
	if len(open) == 0 {
		l.unattributed++
	}
	for _, inj := range open {
		inj.violations++
		inj.peak = max(inj.peak, v)
		if ep.count == 1 {
			inj.episodes++
			if len(open) == 1 {
				inj.alone++
			}
		}
	}
	if ep.count == 1 {
		ep.windows = windows
	}
	if len(l.records) < maxRecords {
		l.records = append(l.records, violationRec{at: at, value: v, windows: windows})
	}
}

// writeRecords writes every violation as a line "offset value windows".
func (l *ledger) writeRecords(w io.Writer) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	bw := bufio.NewWriter(w)
	fmt.Fprintln(bw, "offset_s\tin_flight\topen_fault_windows")
	for _, r := range l.records {
		fmt.Fprintf(bw, "%.3f\t%d\t%s\n", r.at.Sub(l.begun).Seconds(), r.value, strings.Join(r.windows, ", "))
	}
	return bw.Flush()
}
