package fleet

import (
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/quota"
)

// metrics holds the node's counters and the latest quota headers read
// (Node.Quota), and exposes the node's state as a prometheus.Collector.
type metrics struct {
	node     *Node
	rejected atomic.Uint64
	refused  [256]atomic.Uint64 // by priority: the node's refusals, before its limiter or at the rate (Node.PriorityStats)
	// By priority: the requests the node handed a lease to (past the
	// limiter and the rate), their weights, and those whose context ended
	// while they waited for the rate (Node.PriorityStats).
	admitted, admittedWeight, rateCancelled [256]atomic.Uint64
	heartbeatErrors                         atomic.Uint64
	fencings                                atomic.Uint64
	quotaPaused                             atomic.Uint64 // pauses the headers started (see Node.quotaPause)
	quotaMu                                 sync.Mutex
	quotaPauseEnd                           time.Time // the end of the latest pause the headers asked for; guarded by quotaMu
	quota                                   atomic.Pointer[quota.Info]
	heartbeat                               prometheus.Histogram

	limit, estimate, share, lGlobal, inflight, queued, peerInflight, liveNodes  *prometheus.Desc
	drops, rejections, heartbeatFailures, fenceEvents, fenced, outage, draining *prometheus.Desc
	learning, quotaPauses, waitingNodes, expiredLeases                          *prometheus.Desc

	// Rate budgets, labelled "dimension" (requests, tokens), per minute.
	rateKey, rateShare, rateLearned, rateDemand, rateUsed *prometheus.Desc
	rateWaiting, rateWaits                                *prometheus.Desc

	// Per priority, labelled "priority" (0–255), for the priorities that
	// have seen a request: see adaptive.PriorityStats.
	prioAdmitted, prioAdmittedWeight, prioRefused, prioTimedOut, prioCancelled *prometheus.Desc
	prioQueued, prioWaits, prioWaitSeconds                                     *prometheus.Desc
}

func newMetrics(n *Node) *metrics {
	labels := prometheus.Labels{"key": n.cfg.Key, "node": n.cfg.NodeID}
	desc := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("fleetlimit_"+name, help, nil, labels)
	}
	byPriority := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("fleetlimit_priority_"+name, help, []string{"priority"}, labels)
	}
	byDimension := func(name, help string) *prometheus.Desc {
		return prometheus.NewDesc("fleetlimit_rate_"+name, help, []string{"dimension"}, labels)
	}
	return &metrics{
		node: n,
		heartbeat: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:        "fleetlimit_heartbeat_duration_seconds",
			Help:        "Time from sending a heartbeat to its grant or error.",
			ConstLabels: labels,
			Buckets:     []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5},
		}),
		limit:        desc("limit", "Requests the node may have in flight now: at most the local estimate, and at most the share less the slots recent drops cut from it (a rise of the share taken up over a round trip; MinLimit while recalibrating); 0 before the first grant, after Stop, once evicted, and once the lease has run out (under HoldLastShare it keeps the last share then)."),
		estimate:     desc("estimate", "The node's local inference of the whole upstream's capacity (l_local)."),
		share:        desc("share", "The node's share of the global limit, as last granted."),
		lGlobal:      desc("l_global", "The fleet's global limit for the key, as last granted."),
		inflight:     desc("inflight", "Sum of the weights of the requests this node has in flight (their number when each weighs 1)."),
		queued:       desc("queued", "Acquire calls waiting for a slot."),
		peerInflight: desc("peer_inflight", "The other nodes' in-flight requests, as of the last grant."),
		liveNodes:    desc("live_nodes", "Live nodes on the key, this one included, as of the last grant."),
		waitingNodes: desc("waiting_nodes", "Other live nodes on the key that want capacity and hold a share of 0, "+
			"as of the last grant: above 0 for long, more nodes want the key than its L_global holds, and they take turns."),
		drops:             desc("drops_total", "Requests settled as dropped (429, 503, 529, timeout)."),
		rejections:        desc("rejections_total", rejectionsHelp),
		heartbeatFailures: desc("heartbeat_failures_total", "Heartbeats that failed or timed out."),
		fenceEvents:       desc("fencings_total", "Times the node was fenced."),
		expiredLeases:     desc("leases_expired_total", "Leases nobody settled, freed a second after their bound (fleet.Lease)."),
		fenced:            desc("fenced", "1 while the node is fenced: before its first grant, when its lease is about to run out (under HoldLastShare it admits at its last share even so), or once evicted."),
		outage:            desc("outage", "1 while the last heartbeat failed."),
		draining:          desc("draining", "1 while an operator drains the node."),
		quotaPauses: desc("quota_pauses_total", "Admission pauses a response's headers started: a Retry-After on a 429, "+
			"503 or 529 (or given to Lease.Refuse or Unavailable), or quota headers saying nothing was left until a reset (responses asking while a pause lasts extend it)."),
		learning: desc("learning", "1 while the key is in learning mode: its database lost state, and no node "+
			"is granted more than it holds until the leases and requests of before the loss have run out."),
		rateKey:            byDimension("key", "The key's rate per minute (0: none, unpaced), as last granted."),
		rateShare:          byDimension("share", "The node's share of the key's rate per minute, as last granted."),
		rateLearned:        byDimension("learned", "The node's estimate of the key's rate per minute (0: it learns none)."),
		rateDemand:         byDimension("demand", "The node's rate demand per minute, as last reported."),
		rateUsed:           byDimension("used", "What the node sent in the minute before its last report."),
		rateWaiting:        desc("rate_waiting", "Admitted requests waiting for the node's rate share now."),
		rateWaits:          desc("rate_waits_total", "Requests that waited for the node's rate share."),
		prioAdmitted:       byPriority("admitted_total", "Requests at this priority handed a lease, past the local limiter and the key's rate."),
		prioAdmittedWeight: byPriority("admitted_weight_total", "Sum of the weights of the requests admitted at this priority."),
		prioRefused: byPriority("refused_total", "Requests at this priority refused: by the local limiter (no room for "+
			"TryAcquire, queue full on arrival or evicted, paused, heavier than MaxLimit) or by the node (not started, "+
			"stopped, evicted, fenced, heavier than L_global, the rate share spent for TryAcquire, a wait for the rate past MaxRequestDuration)."),
		prioTimedOut:    byPriority("timed_out_total", "Queued requests at this priority whose TimeoutFactor × weight wait ran out."),
		prioCancelled:   byPriority("cancelled_total", "Requests at this priority whose context ended before a lease was handed over, waiting for a slot or for the rate."),
		prioQueued:      byPriority("queued", "Requests at this priority waiting for a slot now."),
		prioWaits:       byPriority("waits_total", "Requests at this priority the local limiter handed a slot after a wait in its queue (the key's rate may refuse them still)."),
		prioWaitSeconds: byPriority("wait_seconds_total", "Total time the requests in waits_total waited, in seconds."),
	}
}

// Describe implements prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{m.limit, m.estimate, m.share, m.lGlobal, m.inflight, m.queued,
		m.peerInflight, m.liveNodes, m.waitingNodes, m.drops, m.rejections, m.heartbeatFailures, m.fenceEvents, m.fenced,
		m.outage, m.draining, m.learning, m.quotaPauses, m.expiredLeases, m.prioAdmitted, m.prioAdmittedWeight, m.prioRefused,
		m.prioTimedOut, m.prioCancelled, m.prioQueued, m.prioWaits, m.prioWaitSeconds, m.rateKey, m.rateShare,
		m.rateLearned, m.rateDemand, m.rateUsed, m.rateWaiting, m.rateWaits} {
		ch <- d
	}
	m.heartbeat.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	s := m.node.State()
	gauge := func(d *prometheus.Desc, v float64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.GaugeValue, v)
	}
	counter := func(d *prometheus.Desc, v uint64) {
		ch <- prometheus.MustNewConstMetric(d, prometheus.CounterValue, float64(v))
	}
	gauge(m.limit, float64(s.Limit))
	gauge(m.estimate, s.Estimate)
	gauge(m.share, float64(s.Share))
	gauge(m.lGlobal, float64(s.LGlobal))
	gauge(m.inflight, float64(s.Inflight))
	gauge(m.queued, float64(s.Queued))
	gauge(m.peerInflight, float64(s.PeerInflight))
	gauge(m.liveNodes, float64(s.LiveNodes))
	gauge(m.waitingNodes, float64(s.Waiting))
	counter(m.drops, s.Drops)
	counter(m.rejections, m.rejected.Load())
	counter(m.heartbeatFailures, m.heartbeatErrors.Load())
	counter(m.fenceEvents, m.fencings.Load())
	counter(m.quotaPauses, m.quotaPaused.Load())
	counter(m.expiredLeases, m.node.expired.total.Load())
	gauge(m.fenced, b2f(s.Fenced))
	gauge(m.outage, b2f(s.Outage))
	gauge(m.draining, b2f(s.Status == coord.StatusDraining))
	gauge(m.learning, b2f(s.Learning))
	rs := m.node.Rates()
	for _, r := range []struct {
		d *prometheus.Desc
		v coord.Rates
	}{{m.rateKey, rs.Key}, {m.rateShare, rs.Share}, {m.rateLearned, rs.Learned}, {m.rateDemand, rs.Demand}, {m.rateUsed, rs.Used}} {
		ch <- prometheus.MustNewConstMetric(r.d, prometheus.GaugeValue, float64(r.v.Requests), "requests")
		ch <- prometheus.MustNewConstMetric(r.d, prometheus.GaugeValue, float64(r.v.Tokens), "tokens")
	}
	gauge(m.rateWaiting, float64(rs.Waiting))
	counter(m.rateWaits, m.node.rate.waits.Load())
	for _, p := range m.node.PriorityStats() {
		label := strconv.Itoa(int(p.Priority))
		metric := func(d *prometheus.Desc, t prometheus.ValueType, v float64) {
			ch <- prometheus.MustNewConstMetric(d, t, v, label)
		}
		metric(m.prioAdmitted, prometheus.CounterValue, float64(p.Admitted))
		metric(m.prioAdmittedWeight, prometheus.CounterValue, float64(p.AdmittedWeight))
		metric(m.prioRefused, prometheus.CounterValue, float64(p.Refused))
		metric(m.prioTimedOut, prometheus.CounterValue, float64(p.TimedOut))
		metric(m.prioCancelled, prometheus.CounterValue, float64(p.Cancelled))
		metric(m.prioQueued, prometheus.GaugeValue, float64(p.Queued))
		metric(m.prioWaits, prometheus.CounterValue, float64(p.Waits))
		metric(m.prioWaitSeconds, prometheus.CounterValue, p.WaitTime.Seconds())
	}
	m.heartbeat.Collect(ch)
}

func b2f(b bool) float64 {
	if b {
		return 1
	}
	return 0
}

// Collector returns a prometheus.Collector of the node's metrics, labelled
// with its key and node id: register it with a prometheus.Registerer. Each
// scrape reads the node's State, its Rates, its PriorityStats and its
// counters one after the other, not at one instant, so two series may be
// microseconds apart; it is safe for concurrent use.
func (n *Node) Collector() prometheus.Collector { return n.metrics }

// rejectionsHelp is fleetlimit_rejections_total's help text.
const rejectionsHelp = "Admissions that got no slot: refused (no room for TryAcquire, queue full, paused, " +
	"draining, not started, fenced, evicted, stopped, too heavy, rate spent), ended by the caller's context or the wait's bound while " +
	"queued or waiting for the rate, or invalid (a bad weight or token estimate). The fleetlimit_priority_* " +
	"series tell refusals from ended waits."
