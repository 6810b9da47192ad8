package chaos

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/internal/pgtemp"
)

// Environment variables read by this test.
const (
	envFaults  = "FLEET_CHAOS_FAULTS" // faults to inject (default 100)
	envSeed    = "FLEET_CHAOS_SEED"   // the schedule's seed (default: the time)
	envLogDir  = "FLEET_CHAOS_LOGDIR" // keep node logs and the report here
	envMode    = "FLEET_CHAOS_MODE"   // "mixed" (default) or "solo"
	envRequire = "FLEET_REQUIRE_PG"   // "1": fail rather than skip without Postgres
	envCI      = "CI"                 // set: same
)

// params are one run's settings.
type params struct {
	nodes, workers int
	max            int // the operator's max on the key: M
	localLimit     int // every node's fixed local estimate, above M
	heartbeat      time.Duration
	lease          time.Duration
	fenceMargin    time.Duration
	hbTimeout      time.Duration
	stopTimeout    time.Duration
	maxRequest     time.Duration // every node's MaxRequestDuration, above the longest stream
	minMS, maxMS   int           // plain requests
	streamFrac     float64       // fraction of requests that are streams
	streamMS       int           // streams last [streamMS, streamMaxMS]
	streamMaxMS    int
	faults         int
	seed           uint64
	// solo injects one fault at a time, each once the previous one's
	// window has closed, so that every violation has one cause; mixed (the
	// default) overlaps node faults and runs database faults alongside.
	solo bool
	// kinds are the faults to inject; nil means all of them.
	kinds []string
}

func defaultParams(t *testing.T) params {
	p := params{
		nodes: 5, workers: 12,
		max: 24, localLimit: 48,
		heartbeat: 200 * time.Millisecond, lease: time.Second, fenceMargin: 250 * time.Millisecond,
		hbTimeout: 500 * time.Millisecond, stopTimeout: 5 * time.Second, maxRequest: 3 * time.Second,
		minMS: 20, maxMS: 300,
		streamFrac: 0.2, streamMS: 1000, streamMaxMS: 1500,
		faults: 100,
		seed:   uint64(time.Now().UnixNano()),
	}
	if v := os.Getenv(envFaults); v != "" {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, envFaults)
		p.faults = n
	}
	switch v := os.Getenv(envMode); v {
	case "", "mixed":
	case "solo":
		p.solo = true
	default:
		t.Fatalf("%s=%q: want mixed or solo", envMode, v)
	}
	if v := os.Getenv(envSeed); v != "" {
		n, err := strconv.ParseUint(v, 10, 64)
		require.NoError(t, err, envSeed)
		p.seed = n
	}
	return p
}

// only returns the kinds among kinds that p injects, in a new slice.
func (p params) only(kinds []string) []string {
	if p.kinds == nil {
		return append([]string{}, kinds...)
	}
	var out []string
	for _, k := range kinds {
		if slices.Contains(p.kinds, k) {
			out = append(out, k)
		}
	}
	return out
}

func (p params) nodeFlags() []string {
	return []string{
		"-workers", strconv.Itoa(p.workers),
		"-min-ms", strconv.Itoa(p.minMS), "-max-ms", strconv.Itoa(p.maxMS),
		"-stream-frac", strconv.FormatFloat(p.streamFrac, 'f', -1, 64),
		"-stream-ms", strconv.Itoa(p.streamMS), "-stream-max-ms", strconv.Itoa(p.streamMaxMS),
		"-heartbeat", p.heartbeat.String(), "-lease", p.lease.String(),
		"-fence-margin", p.fenceMargin.String(), "-heartbeat-timeout", p.hbTimeout.String(),
		"-limit", strconv.Itoa(p.localLimit), "-stop-timeout", p.stopTimeout.String(),
		"-max-request", p.maxRequest.String(),
	}
}

// requirePostgres skips t without the Postgres server binaries, or fails it
// when Postgres is required (FLEET_REQUIRE_PG=1 or CI set, as in
// fleettest).
func requirePostgres(t *testing.T) {
	t.Helper()
	dir, err := pgtemp.FindBinDir()
	if err == nil {
		for _, tool := range []string{"pg_basebackup", "pg_ctl"} {
			if _, statErr := os.Stat(filepath.Join(dir, tool)); statErr != nil {
				err = fmt.Errorf("%s has no %s: %w", dir, tool, pgtemp.ErrNotInstalled)
			}
		}
	}
	if err == nil {
		return
	}
	ci := os.Getenv(envCI)
	if os.Getenv(envRequire) == "1" || (ci != "" && ci != "false" && ci != "0") {
		t.Fatal(err)
	}
	t.Skip(err)
}

// run is one chaos run.
type run struct {
	t    *testing.T
	p    params
	key  string
	args nodeArgs
	db   *database
	prov *provider
	// upstream is the proxy between the nodes and prov.
	upstream *tcpProxy
	led      *ledger

	slots []*slot

	rngMu sync.Mutex
	rng   *rand.Rand

	findMu   sync.Mutex
	findings map[string][]string // per fault kind, what was seen

	lostDrains atomic.Int64 // drains not in force after a lease lapse
	revived    atomic.Int64 // evicted processes seen active again

	drainMu  sync.Mutex
	draining map[string]bool // node ids a drain-across-lapse fault drains now
	evicting map[string]bool // node ids an evict-restart fault evicts now
	// failedOver is when the last failover healed (unix nanoseconds).
	failedOver atomic.Int64
}

func (r *run) uniform(lo, hi float64) float64 {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return lo + (hi-lo)*r.rng.Float64()
}

func (r *run) intn(n int) int {
	r.rngMu.Lock()
	defer r.rngMu.Unlock()
	return r.rng.IntN(n)
}

// leases returns a duration of lo to hi lease TTLs.
func (r *run) leases(lo, hi float64) time.Duration {
	return time.Duration(r.uniform(lo, hi) * float64(r.p.lease))
}

// check reports a harness error without stopping the run; it is safe to
// call from any goroutine.
func (r *run) check(err error) {
	if err != nil {
		r.t.Errorf("chaos harness: %v", err)
	}
}

func (r *run) find(kind, format string, args ...any) {
	r.findMu.Lock()
	defer r.findMu.Unlock()
	r.findings[kind] = append(r.findings[kind], fmt.Sprintf(format, args...))
}

// TestChaos runs a fleet of node processes through real faults and checks,
// at the provider, that the requests in flight never exceed the key's max.
func TestChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("the chaos run takes minutes")
	}
	requirePostgres(t)
	runChaos(t, defaultParams(t))
}

// TestChaosUpstreamCut: the proxy between the fleet and the provider
// restarts, closing every connection, twelve times, one at a time. The
// provider goes on serving the requests it received; a request that had
// no response yet is one http.Transport would send again beside it, on
// the same slot, unless Transport holds that slot and sends it on one of
// its own.
func TestChaosUpstreamCut(t *testing.T) {
	if testing.Short() {
		t.Skip("the cut cycles take a minute")
	}
	runSolo(t, faultCut, 12)
}

// TestChaosFreeze: a node process frozen (SIGSTOP) for longer than its
// lease and resumed (SIGCONT), twelve times, one at a time. On resuming,
// its finished responses free slots and its callers retry at once, before
// any timer of the process has run: admission itself must see that the
// grant has expired.
func TestChaosFreeze(t *testing.T) {
	if testing.Short() {
		t.Skip("the freeze cycles take a minute and a half")
	}
	runSolo(t, faultStop, 12)
}

// runSolo injects faults of kind alone, one at a time: n of them, or
// FLEET_CHAOS_FAULTS.
func runSolo(t *testing.T, kind string, n int) {
	requirePostgres(t)
	p := defaultParams(t)
	p.solo, p.kinds, p.faults = true, []string{kind}, n
	if v := os.Getenv(envFaults); v != "" {
		var err error
		p.faults, err = strconv.Atoi(v)
		require.NoError(t, err, envFaults)
	}
	runChaos(t, p)
}

// runChaos runs one chaos run with p and checks its promises.
func runChaos(t *testing.T, p params) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	begin := time.Now()

	logDir := os.Getenv(envLogDir)
	if logDir == "" {
		logDir = t.TempDir()
	} else {
		logDir = filepath.Join(logDir, t.Name())
		require.NoError(t, os.MkdirAll(logDir, 0o755))
	}
	bin := filepath.Join(logDir, "chaosnode")
	build := exec.Command("go", "build", "-o", bin, "./chaosnode")
	out, err := build.CombinedOutput()
	require.NoError(t, err, "go build ./test/chaos/chaosnode:\n%s", out)

	r := &run{
		t:        t,
		p:        p,
		key:      fmt.Sprintf("chaos-%d", time.Now().UnixNano()),
		rng:      rand.New(rand.NewPCG(p.seed, p.seed^0x9e3779b97f4a7c15)),
		findings: map[string][]string{},
	}
	// A fault's effects can outlast its heal by a lease (the database
	// expiring a row) plus the request bound (the row's reserve held for
	// requests that may still run), plus a heartbeat.
	tail := p.lease + p.maxRequest + p.heartbeat
	r.led = newLedger(tail, t.Logf)
	mode := "mixed"
	if p.solo {
		mode = "solo"
	}
	t.Logf("seed %d (%s=%d to replay the schedule), %s faults, %d nodes × %d workers, M = %d, heartbeat %v, lease %v, fence margin %v, request bound %v, fault window tail %v",
		p.seed, envSeed, p.seed, mode, p.nodes, p.workers, p.max, p.heartbeat, p.lease, p.fenceMargin, p.maxRequest, tail)

	tox := newToxiproxy()
	r.db, err = startDatabase(ctx, tox, r.key, p.max)
	if r.db != nil {
		t.Cleanup(func() { assert.NoError(t, r.db.close()) })
	}
	require.NoError(t, err)
	r.prov, err = startProvider(p.max, time.Duration(p.streamMS)*time.Millisecond, r.led)
	require.NoError(t, err)
	t.Cleanup(func() { assert.NoError(t, r.prov.close()) })
	// The nodes reach the provider through a proxy of its own, which
	// the upstream-cut fault restarts.
	r.upstream, err = newTCPProxy(tox, "upstream", strings.TrimSuffix(strings.TrimPrefix(r.prov.url, "http://"), "/"))
	require.NoError(t, err)
	t.Cleanup(r.upstream.stop)
	r.args = nodeArgs{bin: bin, key: r.key, provider: "http://" + r.upstream.addr + "/", logDir: logDir, flags: p.nodeFlags()}

	for i := range p.nodes {
		proxy, err := newTCPProxy(tox, fmt.Sprintf("node-%d", i+1), r.db.current().Addr())
		require.NoError(t, err)
		t.Cleanup(proxy.stop)
		s := &slot{idx: i, proxy: proxy}
		r.slots = append(r.slots, s)
		_, err = s.launch(r.args, s.newID())
		require.NoError(t, err)
	}
	// Registered last, so it runs first: no node outlives the test.
	t.Cleanup(func() {
		for _, s := range r.slots {
			if _, proc := s.current(); proc != nil {
				proc.kill()
			}
		}
	})
	for _, s := range r.slots {
		id, proc := s.current()
		_, ok := proc.waitHealthy(begin, 30*time.Second)
		require.True(t, ok, "node %s did not join: %+v", id, proc.latest())
	}
	t.Logf("fleet joined in %v; injecting %d faults", time.Since(begin).Round(time.Millisecond), p.faults)

	if p.solo {
		r.chaosSolo(ctx)
	} else {
		r.chaos(ctx)
	}
	healed := time.Now()
	t.Logf("%s all %d faults healed", r.led.since(healed), r.led.count())

	r.checkSettled(ctx)
	r.shutdown()
	report := r.report(time.Since(begin))
	t.Log("\n" + report)
	if os.Getenv(envLogDir) != "" {
		r.check(os.WriteFile(filepath.Join(logDir, "report.txt"), []byte(report), 0o644))
		f, err := os.Create(filepath.Join(logDir, "violations.tsv"))
		r.check(err)
		if err == nil {
			r.check(errors.Join(r.led.writeRecords(f), f.Close()))
		}
	}
	r.led.mu.Lock()
	violations := r.led.violations
	r.led.mu.Unlock()
	assert.Zero(t, violations, "admissions that took the provider above M = %d (peak %d)", p.max, r.prov.peak.Load())
	assert.Zero(t, r.lostDrains.Load(), "drains lost across a lease lapse")
	assert.Zero(t, r.revived.Load(), "evicted processes that became active again")
}

// Fault kinds. Node faults act on one node and may overlap on different
// nodes; database and fleet-wide faults run one at a time.
const (
	faultKillSame   = "kill9-restart-same-id"
	faultKillNew    = "kill9-restart-new-id"
	faultStop       = "sigstop-sigcont"
	faultReset      = "partition-drop-reset"
	faultBlackhole  = "partition-drop-blackhole"
	faultHold       = "partition-hold-deliver"
	faultEvict      = "evict-restart"
	faultDrainLapse = "drain-across-lapse"
	faultPGRestart  = "pg-restart"
	faultPGDown     = "pg-down-5s"
	faultRolling    = "rolling-sigterm"
	faultFailover   = "failover"
	faultCut        = "upstream-cut"
)

// noWindow labels the violations no fault window explains.
const noWindow = "(no fault window)"

var (
	nodeFaults   = []string{faultKillSame, faultKillNew, faultStop, faultReset, faultBlackhole, faultHold, faultEvict, faultDrainLapse}
	globalFaults = []string{faultPGRestart, faultFailover, faultPGDown, faultRolling, faultCut}
	allFaults    = append(append([]string{}, nodeFaults...), globalFaults...)
)

// chaos injects faults until p.faults were injected: a node fault on a
// random idle node every 1.2–2.4s, and in parallel, one at a time, the
// database and fleet-wide faults in turn every 6–10s.
func (r *run) chaos(ctx context.Context) {
	var wg sync.WaitGroup
	stopGlobal := make(chan struct{})
	global := r.p.only(globalFaults)
	wg.Go(func() {
		for i := 0; len(global) > 0; i++ {
			select {
			case <-stopGlobal:
				return
			case <-time.After(time.Duration(r.uniform(6, 10) * float64(time.Second))):
			}
			r.globalFault(ctx, global[i%len(global)])
		}
	})
	var order []string
	for r.led.count() < r.p.faults {
		time.Sleep(time.Duration(r.uniform(1.2, 2.4) * float64(time.Second)))
		s := r.idleSlot()
		if s == nil {
			continue
		}
		if len(order) == 0 {
			order = r.p.only(nodeFaults)
			r.rngMu.Lock()
			r.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			r.rngMu.Unlock()
		}
		kind := order[0]
		order = order[1:]
		wg.Go(func() {
			defer s.busy.Unlock()
			r.nodeFault(ctx, s, kind)
		})
	}
	close(stopGlobal)
	wg.Wait()
	if r.led.countKind(faultFailover) == 0 && len(r.p.only([]string{faultFailover})) > 0 {
		r.globalFault(ctx, faultFailover)
	}
}

// chaosSolo injects faults one at a time until p.faults were injected: every
// kind once per round, in a random order, each once the previous fault's
// window has closed.
func (r *run) chaosSolo(ctx context.Context) {
	var order []string
	for r.led.count() < r.p.faults {
		r.led.waitQuiet()
		time.Sleep(300 * time.Millisecond)
		if len(order) == 0 {
			order = r.p.only(allFaults)
			r.rngMu.Lock()
			r.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			r.rngMu.Unlock()
		}
		kind := order[0]
		order = order[1:]
		if slices.Contains(globalFaults, kind) {
			r.globalFault(ctx, kind)
			continue
		}
		s := r.slots[r.intn(len(r.slots))]
		s.busy.Lock()
		r.nodeFault(ctx, s, kind)
		s.busy.Unlock()
	}
	if r.led.countKind(faultFailover) == 0 && len(r.p.only([]string{faultFailover})) > 0 {
		r.led.waitQuiet()
		r.globalFault(ctx, faultFailover)
	}
}

// idleSlot returns a random slot no fault is acting on, locked, or nil.
func (r *run) idleSlot() *slot {
	start := r.intn(len(r.slots))
	for i := range r.slots {
		s := r.slots[(start+i)%len(r.slots)]
		if s.busy.TryLock() {
			return s
		}
	}
	return nil
}

// restart starts a new process for s with node id id and waits for it to be
// healthy; it returns a note for the log.
func (r *run) restart(s *slot, id string) string {
	begin := time.Now()
	proc, err := s.launch(r.args, id)
	if err != nil {
		r.t.Errorf("restart %s: %v", id, err)
		return "restart failed"
	}
	if st, ok := proc.waitHealthy(begin, 15*time.Second); !ok {
		return fmt.Sprintf("%s not healthy 15s after restart: %+v", id, st)
	}
	return fmt.Sprintf("%s healthy %.2fs after restart", id, time.Since(begin).Seconds())
}

func (r *run) nodeFault(ctx context.Context, s *slot, kind string) {
	id, proc := s.current()
	inj := r.led.begin(kind, id)
	switch kind {
	case faultKillSame, faultKillNew:
		proc.kill()
		newID := id
		if kind == faultKillNew {
			newID = s.newID()
		}
		r.led.heal(inj, "%s", r.restart(s, newID))

	case faultStop:
		d := r.leases(1.5, 3)
		proc.signal(syscall.SIGSTOP)
		time.Sleep(d)
		proc.signal(syscall.SIGCONT)
		r.led.heal(inj, "stopped %.2fs", d.Seconds())

	case faultReset, faultBlackhole, faultHold:
		d := r.leases(1.5, 2.5)
		var err error
		switch kind {
		case faultReset: // every connection reset as soon as it carries a byte
			err = s.proxy.both("cut", "reset_peer", map[string]any{"timeout": 0})
		case faultBlackhole: // every byte dropped, connections left open
			err = s.proxy.both("cut", "timeout", map[string]any{"timeout": 0})
		case faultHold: // every byte held, delivered when the toxic goes
			err = s.proxy.both("cut", "latency", map[string]any{"latency": 60_000})
		}
		r.check(err)
		time.Sleep(d)
		r.check(s.proxy.removeBoth("cut"))
		r.led.heal(inj, "partitioned %.2fs", d.Seconds())

	case faultEvict:
		note := ""
		r.setEvicting(id, true)
		// The eviction takes effect when it commits, which may be long
		// after the fault began when the database is restarting (the
		// evict is retried): the node's heartbeats until then are
		// rightly answered 'active'.
		evicted, evictErr := r.db.evict(ctx, r.key, id, inj.id)
		if evictErr != nil {
			// A node whose row is gone (it is rejoining after an outage
			// longer than its lease and request bound) cannot be evicted.
			note = fmt.Sprintf("evict: %v; ", evictErr)
		}
		// The evicted process stops admitting for good, drains and
		// leaves; an operator then restarts it. Watch it for a while:
		// it must never be active again. A failover loses the last
		// second's writes, an eviction too; it evicts again when it
		// heals, so the node is judged a lease after that.
		watchUntil := time.Now().Add(r.p.lease + 2*time.Second)
		for evictErr == nil && time.Now().Before(watchUntil) {
			since := evicted
			if f := time.Unix(0, r.failedOver.Load()); f.After(since) {
				since = f
				watchUntil = later(watchUntil, f.Add(r.p.lease+2*time.Second))
			}
			if st := proc.latest(); st.Status == "active" && !st.Fenced && st.Share > 0 && st.Time.After(since.Add(r.p.lease)) {
				r.revived.Add(1)
				r.find(kind, "%s admitting again after its eviction (committed at %s): %+v", id, r.led.since(evicted), st)
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		r.setEvicting(id, false) // before the restart, which a failover must not evict
		st := proc.latest()
		row := r.rowFlag(ctx, "evicted", id)
		proc.kill()
		note += fmt.Sprintf("status %q, limit fenced %v, row %s; killed", st.Status, st.Fenced, row)
		r.find(kind, "%s after eviction: status %q, fenced %v, share %d; its rows: %s", id, st.Status, st.Fenced, st.Share, row)
		r.led.heal(inj, "%s; %s", note, r.restart(s, id))

	case faultDrainLapse:
		note := ""
		r.setDraining(id, true)
		defer r.setDraining(id, false)
		drainedAt := time.Now()
		drainErr := r.db.exec(ctx, `SELECT fleetlimit.drain($1, $2)`, r.key, id)
		if drainErr != nil {
			note = fmt.Sprintf("drain: %v; ", drainErr) // e.g. a node still joining has no row yet
		}
		time.Sleep(2 * r.p.heartbeat) // the node learns it is draining
		before := proc.latest()
		d := r.leases(1.5, 2.5)
		r.check(s.proxy.both("cut", "reset_peer", map[string]any{"timeout": 0}))
		time.Sleep(d)
		r.check(s.proxy.removeBoth("cut"))
		healedAt := time.Now()
		// Wait for a heartbeat through the healed proxy (the node has no
		// share while draining, so healthy() would not hold).
		for time.Since(healedAt) < 5*time.Second {
			if st := proc.latest(); st.Time.After(healedAt) && !st.Outage && st.Joined {
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
		seen := r.rowFlag(ctx, "draining", id)
		st := proc.latest()
		r.find(kind, "before: node status %q, share %d; after a %.2fs lapse: row %s, node status %q, share %d",
			before.Status, before.Share, d.Seconds(), seen, st.Status, st.Share)
		// A failover that healed after the drain was sent may have
		// promoted a replica the drain's commit had not reached yet
		// (asynchronous replication): the mark is the operator's to
		// repeat, not one the fleet lost.
		overlapped := time.Unix(0, r.failedOver.Load()).After(drainedAt)
		switch {
		case drainErr == nil && overlapped && seen != "draining":
			note += "a failover overlapped the drain; "
		case drainErr == nil && (seen != "draining" || st.Share != 0):
			r.lostDrains.Add(1)
		}
		if err := r.db.exec(ctx, `SELECT fleetlimit.undrain($1, $2)`, r.key, id); err != nil {
			note += fmt.Sprintf("undrain: %v; ", err)
		}
		r.led.heal(inj, "%slapse %.2fs: %s", note, d.Seconds(), seen)
	}
}

// setDraining records whether a fault is draining id on purpose.
func (r *run) setDraining(id string, on bool) {
	r.drainMu.Lock()
	defer r.drainMu.Unlock()
	if r.draining == nil {
		r.draining = map[string]bool{}
	}
	r.draining[id] = on
}

// setEvicting records whether a fault is evicting id.
func (r *run) setEvicting(id string, on bool) {
	r.drainMu.Lock()
	defer r.drainMu.Unlock()
	if r.evicting == nil {
		r.evicting = map[string]bool{}
	}
	r.evicting[id] = on
}

// later returns the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// reapplyDrains evicts every node id a fault is evicting, drains every
// running node id a fault drains on purpose and undrains the others; an
// id without a row or a mark is fine.
// deleteRefused checks that an operator's delete of the key without
// --force, right after the database may have lost state, is refused as
// such (FL009: the key last heard from its nodes under another
// incarnation, or it is in learning mode) rather than judged on rows that
// may not show what the nodes hold.
func (r *run) deleteRefused(ctx context.Context, after string) {
	err := r.db.exec(ctx, `SELECT fleetlimit.delete_key($1, false)`, r.key)
	if pgErr := (*pgconn.PgError)(nil); !errors.As(err, &pgErr) || pgErr.Code != "FL009" {
		r.t.Errorf("keys delete right after %s: want FL009 (the database may have lost the key's state), got %v", after, err)
	}
}

func (r *run) reapplyDrains(ctx context.Context) {
	r.drainMu.Lock()
	var evict []string
	for id, on := range r.evicting {
		if on {
			evict = append(evict, id)
		}
	}
	r.drainMu.Unlock()
	for _, id := range evict {
		_ = r.db.exec(ctx, `SELECT fleetlimit.evict($1, $2)`, r.key, id)
	}
	for _, s := range r.slots {
		id, _ := s.current()
		r.drainMu.Lock()
		skip := r.draining[id]
		r.drainMu.Unlock()
		if skip {
			// A drain-across-lapse fault drains it now: its drain may
			// have been acknowledged by the primary the failover lost.
			_ = r.db.exec(ctx, `SELECT fleetlimit.drain($1, $2)`, r.key, id)
		} else {
			_ = r.db.exec(ctx, `SELECT fleetlimit.undrain($1, $2)`, r.key, id)
		}
	}
}

// rowFlag tells whether the node id is draining (its drain mark, and its
// member row's flag) or whether any of its rows is evicted, and describes
// it: "draining", "NOT draining", "no row", ...
func (r *run) rowFlag(ctx context.Context, column, id string) string {
	query := `SELECT bool_or(evicted) FROM fleetlimit.nodes WHERE key = $1 AND node_id = $2`
	if column == "draining" {
		query = `SELECT EXISTS (SELECT 1 FROM fleetlimit.drains WHERE key = $1 AND node_id = $2)
		           AND coalesce(bool_and(draining) FILTER (WHERE lease_expires_at > now() AND NOT (evicted OR departed)), true)
		          FROM fleetlimit.nodes WHERE key = $1 AND node_id = $2`
	}
	var set *bool
	err := r.db.queryRow(ctx, query, []any{r.key, id}, &set)
	switch {
	case err != nil:
		return "query failed: " + err.Error()
	case set == nil:
		return "no row"
	case *set:
		return column
	default:
		return "NOT " + column
	}
}

func (r *run) globalFault(ctx context.Context, kind string) {
	inj := r.led.begin(kind, "fleet")
	switch kind {
	case faultPGRestart:
		begin := time.Now()
		r.check(r.db.restart(ctx))
		r.led.heal(inj, "restarted in %.2fs", time.Since(begin).Seconds())
		r.deleteRefused(ctx, "a restart")

	case faultPGDown:
		r.check(r.db.down(ctx, 5*time.Second))
		r.led.heal(inj, "")
		r.deleteRefused(ctx, "a server down and up again")

	case faultFailover:
		proxies := make([]*tcpProxy, len(r.slots))
		for i, s := range r.slots {
			proxies[i] = s.proxy
		}
		r.check(r.db.failover(ctx, time.Second, proxies))
		// Writes of the last second before the failover are lost, the
		// operator's too: an undrain, a drain or an eviction may be
		// undone. Like an operator after a failover, apply the operator
		// state again.
		r.reapplyDrains(ctx)
		r.deleteRefused(ctx, "a failover")
		r.failedOver.Store(time.Now().UnixNano())
		r.led.heal(inj, "now on %s", r.db.current().Addr())
		begin := time.Now()
		r.check(r.db.startReplica(ctx))
		r.t.Logf("%s new replica in %.2fs", r.led.since(time.Now()), time.Since(begin).Seconds())

	case faultCut:
		// A proxy or load balancer between the fleet and the provider
		// restarts: every connection closes, the provider goes on
		// serving what it received, and http.Transport would send the
		// requests that had no response yet again.
		r.check(r.upstream.cut())
		r.led.heal(inj, "")

	case faultRolling:
		var notes []string
		for _, s := range r.slots {
			s.busy.Lock()
			notes = append(notes, r.rollOne(s))
			s.busy.Unlock()
		}
		r.led.heal(inj, "%s", strings.Join(notes, "; "))
	}
}

// rollOne restarts s's node with SIGTERM once it has a stream in flight.
func (r *run) rollOne(s *slot) string {
	id, proc := s.current()
	deadline := time.Now().Add(3 * time.Second)
	for r.prov.streamsOf(id) == 0 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	streams := r.prov.streamsOf(id)
	begin := time.Now()
	exited := proc.terminate(r.p.stopTimeout + 5*time.Second)
	took := time.Since(begin)
	result := "killed: did not exit"
	if exited {
		switch final := proc.stopResult(); {
		case final == nil:
			result = fmt.Sprintf("exit %d without a Stop line", proc.exitCode())
		case final.StopError != "":
			result = fmt.Sprintf("exit %d, Stop: %s", proc.exitCode(), final.StopError)
		default:
			result = fmt.Sprintf("exit %d, Stop ok", proc.exitCode())
		}
	}
	r.find(faultRolling, "%d streams in flight at SIGTERM, exited after %.2fs: %s", streams, took.Seconds(), result)
	return fmt.Sprintf("%s (%d streams, %.2fs, %s) %s", id, streams, took.Seconds(), result, r.restart(s, id))
}
