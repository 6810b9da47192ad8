package fleet

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fence"
)

// phase is where a Node is in its life.
type phase int

const (
	phaseNew phase = iota
	phaseRunning
	phaseStopping
	phaseStopped
)

// schemaChecker is a coordinator that can tell whether its schema is at the
// version this library needs (coord.Postgres).
type schemaChecker interface {
	CheckSchema(ctx context.Context) error
}

// startTimeout is the least time Start gives its first heartbeat, which may
// also have to open a database connection.
const startTimeout = 5 * time.Second

// forever is how long Stop pauses the limiter: past any process's life.
const forever = 100 * 365 * 24 * time.Hour

// Node is one process's member of a fleet sharing a key: a local adaptive
// limiter whose ceiling is the share the coordinator grants, renewed by
// heartbeats and fenced when its lease is about to run out. Create it with
// New, call Start, wrap calls with Acquire (or use Transport), and Stop it
// on shutdown. All methods are safe for concurrent use.
type Node struct {
	cfg      Config
	coord    coord.Coordinator
	lim      *adaptive.Limiter
	fence    *fence.Fence
	instance string
	log      *slog.Logger
	metrics  *metrics
	rate     *rateState

	floor    floorBackoff // refusals in a row at the last slot (see Lease.Refuse)
	wanting  atomic.Bool  // a demand floor (wanted) may be held
	wantedAt atomic.Int64 // Unix nanoseconds: when the floor was last held (see wantedSince)
	expired  expiredLeases

	kick       chan struct{} // asks the loop for an early heartbeat
	stop       chan struct{} // closed by Stop to end the loop
	done       chan struct{} // closed when the loop has returned
	stopDone   chan struct{} // closed when the first Stop returns
	cancelLoop context.CancelFunc

	mu             sync.Mutex
	phase          phase
	starting       chan struct{} // while a Start runs: closed when it returns
	startLeaveErr  error         // the leave a Stop during Start made Start send failed
	stopErr        error         // the first Stop's result, set before stopDone closes
	seq            int64
	joined         bool // a first grant arrived
	measured       bool // the limiter has had a clean round trip or a drop: its estimate is its own
	share          int
	ramp           ramp // the limiter's ceiling on its way to the share
	lGlobal        int
	epoch          int64 // the epoch of the newest grant applied
	generation     int64
	appliedGen     int64
	status         coord.Status
	drained        context.Context // done while an operator drains the node: it ends the waits for the rate (see pace)
	endDrained     context.CancelFunc
	pausing        context.Context // done when an upstream's pause starts (see quotaPause), then replaced
	endPausing     context.CancelFunc
	learning       bool
	peerInflight   int
	liveNodes      int
	waiting        int // the other members that want capacity and hold a share of 0, as of the last grant
	outage         bool
	lastErr        error
	lastBeat       time.Time     // send time of the last successful heartbeat
	lastSend       time.Time     // send time of the last heartbeat attempt
	failed         *coord.Report // the report of the heartbeat that failed last, while it may be resent (see resend)
	unmet          int           // weight of the admissions refused since the last report
	wanted         int           // the demand floor: the heaviest admission refused since it was last held
	unsentDemand   int           // the largest demand of reports that failed since the last success
	yieldUntil     time.Time     // a report before it still steps aside (see waitsForHeavier)
	admittedAtWait uint64        // admissions at the last report that waitsForHeavier (see stepAside)
	turnUntil      time.Time     // a report before it still gives the node's turn (see giveTurn)
	admittedAtTurn uint64        // admissions at the last report that could give a turn
	heldSince      time.Time     // when the share last rose from 0 (see giveTurn)
	turnHold       int           // intervals to hold a share of 1 before giving a turn; 0: turnLength
	turnEnded      time.Time     // when the last turn ended, until a grant says whether it was taken
	turnAsked      bool          // a grant came after it
	pressed        int           // the demand of the last report that pressed (see press); 0: not pressing
	pressShare     int           // the share granted when that report was sent
	pressAdmitted  uint64        // admissions when pressing last started again
	pressStuck     bool          // the share reached the most a split gives and the node still waited
	pressFlat      int           // reports pressing with coord.MaxCount at which the share did not grow
	pressTop       int           // L_global − (live nodes − 1) when pressStuck was set
	heavyWaits     map[int]int   // callers waiting in AcquireRequest, by weight (above 1)
	heavyAdmits    uint64        // admissions of such callers of the heaviest weight waiting (see endHeavyWait)
	lowered        bool          // share fell below in-flight; beat once drained
	ackDue         bool          // a lowered share was applied; beat to ack it
	tickedAtReport bool          // the last report took the probe's tick (slow start), so its grant does not
	claimed        bool          // a heartbeat claimed capacity (share or rate) this period
	left           bool          // an evicted node drained and left on its own
	evictedAt      time.Time     // when the node learned it was evicted
	leaseFenced    bool          // its lease's expiry fenced the node and no renewal has lifted the fence since
	learnCapped    bool          // learning-mode grants of learnEpoch are capped at what the node proves it holds (see learningShare)
	learnEpoch     int64         // the epoch whose learning-mode grants learnCapped caps
	learnHeld      int           // the share the last capped grant of learnEpoch left the node
	fenceTimer     *time.Timer
}

// New returns a Node for cfg that coordinates through the fleetlimit schema
// of the database behind pool (see package migrations). It does no I/O:
// Start sends the first heartbeat.
func New(pool *pgxpool.Pool, cfg Config) (*Node, error) {
	c, err := coord.NewPostgres(pool)
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	return NewWithCoordinator(c, cfg)
}

// NewWithCoordinator returns a Node that heartbeats to c: a coord.Postgres,
// a coord.Memory for tests and single-process use, or a wrapper of either.
func NewWithCoordinator(c coord.Coordinator, cfg Config) (*Node, error) {
	if c == nil {
		return nil, errors.New("fleet: nil coordinator")
	}
	cfg = cfg.withDefaults()
	cfg.Labels = maps.Clone(cfg.Labels) // every report sends them: a caller's later edits must not reach them
	err := cfg.validate()
	lim, limErr := adaptive.New(cfg.Limiter)
	if limErr != nil {
		err = errors.Join(err, fmt.Errorf("fleet: Config.Limiter: %w", limErr))
	}
	if err != nil {
		return nil, err
	}
	lim.SetCeiling(0) // nothing is admitted before the first grant
	var token [8]byte
	if _, err := rand.Read(token[:]); err != nil {
		return nil, fmt.Errorf("fleet: instance token: %w", err)
	}
	n := &Node{
		cfg:      cfg,
		coord:    c,
		lim:      lim,
		instance: hex.EncodeToString(token[:]),
		log:      cfg.Logger.With("key", cfg.Key, "node", cfg.NodeID),
		kick:     make(chan struct{}, 1),
		stop:     make(chan struct{}),
		stopDone: make(chan struct{}),
		done:     make(chan struct{}),
	}
	n.drained, n.endDrained = context.WithCancel(context.Background())
	n.pausing, n.endPausing = context.WithCancel(context.Background())
	n.fence, err = fence.New(fence.Config{SafetyMargin: cfg.FenceMargin, OnFenced: n.onFenced})
	if err != nil {
		return nil, fmt.Errorf("fleet: %w", err)
	}
	if n.rate, err = newRateState(cfg.Rate, time.Now()); err != nil {
		return nil, fmt.Errorf("fleet: Config.Rate: %w", err)
	}
	n.metrics = newMetrics(n)
	return n, nil
}

// Key returns the key the node shares.
func (n *Node) Key() string { return n.cfg.Key }

// ID returns the node's id within its key.
func (n *Node) ID() string { return n.cfg.NodeID }

// Limiter returns the node's local limiter, for reading its state. Changing
// its ceiling would fight the node, which sets it on every heartbeat.
func (n *Node) Limiter() *adaptive.Limiter { return n.lim }

// Start checks that the coordinator's schema is at the version this library
// needs (coord.ErrSchema otherwise, naming both versions), sends the first
// heartbeat and, if it succeeds, starts the heartbeat loop in a goroutine
// and returns nil. ctx bounds the start only: the schema check and the
// first heartbeat (a second one if the first grant came back stale), which
// may have to open a database connection, are each bounded by ctx and by
// 5s or Config.HeartbeatTimeout, whichever is longer (a Postgres heartbeat
// then may still finish for as long again, at most 1s; a Coordinator that
// ignores its context holds Start as long as its call lasts); the loop
// runs until Stop has drained the node, whatever happens to ctx (its values
// are kept). The node admits as soon as that first grant is applied. Start
// returns the first heartbeat's error otherwise (coord.ErrNodeIDInUse when
// another live process holds the node id); it can then be called again.
// Start on a node that is starting (another Start is under way) or
// running returns ErrStarted, and after Stop ErrStopped; a Stop while
// Start runs makes Start leave what its heartbeat joined and return
// ErrStopped.
func (n *Node) Start(ctx context.Context) error {
	n.mu.Lock()
	switch {
	case n.phase == phaseNew && n.starting == nil:
		n.starting = make(chan struct{})
	case n.phase == phaseNew, n.phase == phaseRunning:
		n.mu.Unlock()
		return ErrStarted
	default:
		n.mu.Unlock()
		return fmt.Errorf("%w: Start after Stop", ErrStopped)
	}
	done := n.starting
	n.mu.Unlock()
	defer func() {
		n.mu.Lock()
		if n.starting == done { // not a later Start's
			n.starting = nil
		}
		n.mu.Unlock()
		close(done) // a Stop waiting for this Start returns
	}()
	var err error
	if c, ok := n.coord.(schemaChecker); ok {
		checkCtx, cancel := context.WithTimeout(ctx, max(n.cfg.HeartbeatTimeout, startTimeout))
		err = c.CheckSchema(checkCtx)
		cancel()
	}
	for i := 0; i < 2 && err == nil; i++ {
		if n.phase0() != phaseNew {
			break // stopped: send nothing more
		}
		// A stale first grant (a coordinator wrapper that retried a
		// report whose answer was lost) is not applied: the next
		// report, with a later seq, is answered afresh.
		if err = n.beat(ctx, max(n.cfg.HeartbeatTimeout, startTimeout)); err == nil && n.hasJoined() {
			break
		}
	}
	n.mu.Lock()
	if n.phase != phaseNew {
		// Stop ran meanwhile: whatever a heartbeat joined (this Start's,
		// or a failed earlier one's whose answer was lost) must go.
		if n.fenceTimer != nil {
			n.fenceTimer.Stop()
		}
		n.mu.Unlock()
		if lerr := n.leaveIfSent(context.WithoutCancel(ctx)); lerr != nil {
			n.mu.Lock()
			n.startLeaveErr = lerr // the Stop waiting for this Start returns it
			n.mu.Unlock()
			return fmt.Errorf("%w while it started (and %w)", ErrStopped, lerr)
		}
		return fmt.Errorf("%w while it started", ErrStopped)
	}
	defer n.mu.Unlock()
	// Decided under the lock that Stop takes: a Stop from now on finds no
	// Start to wait for, and sends the departure itself if Start failed.
	n.starting = nil
	switch {
	case errors.Is(err, coord.ErrPermission):
		return fmt.Errorf("fleet: start: %w (the schema owner grants a node's role its rights with 'fleetctl grant node ROLE')", err)
	case err != nil:
		return fmt.Errorf("fleet: start: %w", err)
	case !n.joined:
		return fmt.Errorf("fleet: start: the coordinator answered two first heartbeats as stale")
	}
	n.phase = phaseRunning
	n.applyCeilingLocked()
	n.log.Info("fleet node joined", "share", n.share, "l_global", n.lGlobal, "live_nodes", n.liveNodes)
	loopCtx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	n.cancelLoop = cancel
	go n.loop(loopCtx)
	return nil
}

// phase0 returns the node's phase.
func (n *Node) phase0() phase {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.phase
}

// hasJoined reports whether a grant was applied.
func (n *Node) hasJoined() bool {
	n.mu.Lock()
	defer n.mu.Unlock()
	return n.joined
}

// leaveIfSent sends a node that never ran its departure if a heartbeat
// of it was sent: it may have reached the coordinator even if its answer
// did not. A coordinator without a row of this instance has nothing to
// free.
func (n *Node) leaveIfSent(ctx context.Context) error {
	n.mu.Lock()
	sent := n.seq > 0
	n.mu.Unlock()
	if !sent {
		return nil
	}
	err := n.leave(ctx, 0)
	if errors.Is(err, coord.ErrUnknownNode) || errors.Is(err, coord.ErrUnknownKey) {
		return nil
	}
	return err
}

// Stop leaves the fleet gracefully: it stops admitting (queued Acquire calls
// fail with ErrStopped), keeps heartbeating while the requests in flight
// finish — so the lease that covers them stays alive — then stops the
// heartbeats and leaves, freeing the node's capacity at once. If ctx ends
// first, or Config.MaxRequestDuration passes (by which every request
// admitted before Stop has reached its bound; a Lease never settled is
// freed a second after its bound, so one admitted in the last second
// before Stop may still be held then), Stop leaves anyway and tells the coordinator how many
// requests are still in flight: their capacity stays reserved for
// Config.MaxRequestDuration, by which they must have ended; Stop then
// returns an error wrapping ctx.Err() (or context.DeadlineExceeded) that
// says so, unless none is left in flight by the time it leaves. Should the leave itself
// fail, the coordinator still reserves whatever the node may hold until its
// lease has ended plus MaxRequestDuration. Stop on a node that is
// starting waits for Start to leave what its heartbeat joined; on a node
// whose Start failed it sends the departure in case that heartbeat
// reached the coordinator; on a node never started it only marks it
// stopped. A second Stop waits until the first has left and returns what
// the first returned. Either wait ends early, with an error wrapping
// ctx.Err(), if ctx ends. Stop waits for a heartbeat under way to return,
// and for the departure, however ctx ends: a Coordinator's calls must
// return soon after their context ends (see coord.Coordinator).
func (n *Node) Stop(ctx context.Context) error {
	n.mu.Lock()
	switch n.phase {
	case phaseNew:
		n.phase = phaseStopped
		starting := n.starting
		n.mu.Unlock()
		if starting == nil {
			var err error
			if lerr := n.leaveIfSent(context.WithoutCancel(ctx)); lerr != nil {
				err = fmt.Errorf("fleet: stop: %w", lerr)
			}
			n.stopped1(err)
			return err
		}
		// Done when Start is: a second Stop must not return while Start
		// still leaves, even if this one's ctx ends first.
		go func() {
			<-starting
			n.mu.Lock()
			lerr := n.startLeaveErr
			n.mu.Unlock()
			if lerr != nil {
				lerr = fmt.Errorf("fleet: stop: %w", lerr)
			}
			n.stopped1(lerr)
		}()
		return n.firstStopResult(ctx, "Start is still leaving what it joined")
	case phaseStopping, phaseStopped:
		n.mu.Unlock()
		return n.firstStopResult(ctx, "another Stop is still leaving")
	}
	n.phase = phaseStopping
	n.applyCeilingLocked()
	n.lim.PauseUntil(time.Now().Add(forever)) // fails queued waiters
	n.mu.Unlock()
	err := n.drainAndLeave(ctx)
	n.stopped1(err)
	return err
}

// stopped1 records the first Stop's result, which a second Stop returns,
// and lets the second return.
func (n *Node) stopped1(err error) {
	n.mu.Lock()
	n.stopErr = err
	n.mu.Unlock()
	close(n.stopDone)
}

// drainAndLeave is the first Stop of a running node, from the pause on.
func (n *Node) drainAndLeave(ctx context.Context) error {
	n.stopPacing(time.Now()) // wakes the requests waiting for the rate, which find the node stopping
	n.log.Info("fleet node stopping", "inflight", n.lim.Inflight())

	// Every request admitted before now reaches its bound within
	// MaxRequestDuration: a lease never settled (one lost a moment before
	// Stop is freed a second after that, see Lease) holds Stop no longer.
	drainCtx, cancelDrain := context.WithTimeout(ctx, n.cfg.MaxRequestDuration)
	drainErr := n.waitDrained(drainCtx)
	cancelDrain()
	if drainErr != nil && ctx.Err() == nil {
		drainErr = fmt.Errorf("MaxRequestDuration (%v) passed since Stop: %w", n.cfg.MaxRequestDuration, drainErr)
	}
	close(n.stop)
	n.cancelLoop()
	<-n.done
	n.mu.Lock()
	n.phase = phaseStopped
	if n.fenceTimer != nil {
		n.fenceTimer.Stop()
	}
	left := n.left
	n.mu.Unlock()
	n.expired.flush(n.log, n.cfg.MaxRequestDuration)
	if left {
		return nil
	}
	inflight := n.lim.Inflight()
	if inflight == 0 {
		drainErr = nil // drained as the wait ended: nothing is left in flight to say so of
	}
	err := n.leave(context.WithoutCancel(ctx), inflight)
	switch {
	case err != nil && drainErr != nil:
		return fmt.Errorf("fleet: stop: %s still in flight, and the leave failed: the coordinator keeps "+
			"their capacity reserved until the node's lease ends plus %v: %w", requests(inflight), n.cfg.MaxRequestDuration,
			errors.Join(drainErr, err))
	case err != nil:
		return fmt.Errorf("fleet: stop: %w", err)
	case drainErr != nil:
		n.log.Warn("fleet node left with requests in flight", "inflight", inflight, "reserved_for", n.cfg.MaxRequestDuration)
		return fmt.Errorf("fleet: stop: left with %s still in flight; their capacity stays reserved "+
			"for up to %v: %w", requests(inflight), n.cfg.MaxRequestDuration, drainErr)
	}
	n.log.Info("fleet node left")
	return nil
}

// leave sends the node's last word: it admits nothing more and has inflight
// requests in flight, which may run for up to MaxRequestDuration more.
func (n *Node) leave(ctx context.Context, inflight int) error {
	ctx, cancel := context.WithTimeout(ctx, n.cfg.HeartbeatTimeout)
	defer cancel()
	err := n.coord.Leave(ctx, coord.Departure{Key: n.cfg.Key, NodeID: n.cfg.NodeID, Instance: n.instance,
		Inflight: min(inflight, coord.MaxCount), Hold: n.holdFor()})
	if err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	return nil
}

// firstStopResult waits until the first Stop is done and returns its
// result, or, if ctx ends first, an error that says what was still under
// way (what).
func (n *Node) firstStopResult(ctx context.Context, what string) error {
	select {
	case <-n.stopDone:
		n.mu.Lock()
		defer n.mu.Unlock()
		return n.stopErr
	case <-ctx.Done():
		return fmt.Errorf("fleet: stop: %s: %w", what, ctx.Err())
	}
}

// waitDrained polls until nothing is in flight or ctx ends.
func (n *Node) waitDrained(ctx context.Context) error {
	t := time.NewTicker(5 * time.Millisecond)
	defer t.Stop()
	for n.lim.Inflight() > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-t.C:
		}
	}
	return nil
}

// requests says "1 request" or "n requests".
func requests(n int) string {
	if n == 1 {
		return "1 request"
	}
	return strconv.Itoa(n) + " requests"
}
