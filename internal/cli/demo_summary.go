package cli

import (
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit/internal/sim"
)

// demoSummary is what the demo measured.
type demoSummary struct {
	key      string
	cfg      demoConfig
	schedule []sim.Step
	elapsed  time.Duration
	// idealRate is the goodput the capacity allows over the run: the mean
	// capacity divided by the base latency, in req/s.
	idealRate   float64
	stats       sim.Stats
	maxCapacity int
	nodes       []demoNodeSummary
	learning    demoLearning
}

// demoLearning counts the view's reads of the key (refreshes that
// succeeded) that found it in learning mode: on a database that lost
// state (a restart, say) the demo's key admits only what its nodes hold
// until the mode ends.
type demoLearning struct {
	frames, learning int
	until            time.Time // the last end read
}

// note counts f.
func (d *demoLearning) note(f frame) {
	d.frames++
	if u := f.Key.LearningUntil; u != nil {
		d.learning++
		d.until = *u
	}
}

type demoNodeSummary struct {
	id                  string
	meanShare           float64
	lastShare           int
	successes, rejected int64
	refused, failed     int64
	maxConcurrency      int
}

// newDemoSummary sums up a run that started offset after the provider's
// schedule began and lasted elapsed.
func newDemoSummary(key string, cfg demoConfig, schedule []sim.Step, offset, elapsed time.Duration, st sim.Stats, nodes []*demoNode) demoSummary {
	s := demoSummary{key: key, cfg: cfg, elapsed: elapsed, stats: st}
	for i, step := range schedule {
		if i == 0 || step.At < offset+elapsed {
			s.schedule = append(s.schedule, step) // the steps the run saw
		}
	}
	capSeconds := 0.0 // ∫ capacity dt over [offset, offset+elapsed], capacity·seconds
	for i, step := range schedule {
		end := offset + elapsed
		if i+1 < len(schedule) {
			end = min(end, schedule[i+1].At)
		}
		from := max(offset, step.At)
		if end > from {
			capSeconds += float64(step.Capacity) * (end - from).Seconds()
		}
		if step.At < offset+elapsed {
			s.maxCapacity = max(s.maxCapacity, step.Capacity)
		}
	}
	if elapsed > 0 {
		s.idealRate = capSeconds / elapsed.Seconds() / demoBaseLatency.Seconds()
	}
	for _, dn := range nodes {
		ns := demoNodeSummary{id: dn.id, lastShare: dn.lastShare, refused: dn.refused.Load(), failed: dn.failed.Load()}
		if dn.samples > 0 {
			ns.meanShare = float64(dn.shareSum) / float64(dn.samples)
		}
		cs := st.Clients[dn.id]
		ns.successes, ns.rejected, ns.maxConcurrency = cs.Successes, cs.Rejected, cs.MaxConcurrency
		s.nodes = append(s.nodes, ns)
	}
	return s
}

// write prints the summary.
func (s demoSummary) write(w io.Writer) {
	st := s.stats
	secs := s.elapsed.Seconds()
	sent := st.Successes + st.Rejected + st.Canceled + int64(st.Current) // those still running count as sent
	goodput := 0.0
	if secs > 0 {
		goodput = float64(st.Successes) / secs
	}
	var sched []string
	for i, step := range s.schedule {
		if i == 0 {
			sched = append(sched, strconv.Itoa(step.Capacity))
			continue
		}
		sched = append(sched, fmt.Sprintf("%d at %s", step.Capacity, step.At.Round(100*time.Millisecond)))
	}
	fmt.Fprintf(w, "\nfleetctl demo summary\n")
	fmt.Fprintf(w, "  key               %q on %s\n", s.key, s.cfg.databaseLabel)
	fmt.Fprintf(w, "  fleet             %s × %s, heartbeat every %s\n",
		plural(s.cfg.nodes, "node", "nodes"), plural(s.cfg.workers, "worker", "workers"), demoHeartbeat)
	fmt.Fprintf(w, "  duration          %.1fs\n", secs)
	fmt.Fprintf(w, "  capacity          %s (hidden from the nodes; %s per request)\n", strings.Join(sched, " → "), demoBaseLatency)
	fmt.Fprintf(w, "  goodput           %.1f req/s (%d successful requests; %s of the %.1f req/s the capacity allows)\n",
		goodput, st.Successes, ratio(goodput, s.idealRate), s.idealRate)
	if demand := s.cfg.nodes * s.cfg.workers; demand < s.maxCapacity {
		fmt.Fprintf(w, "  demand            %d workers in all, below the capacity of %d: the goodput is bounded by the demand, not the capacity\n",
			demand, s.maxCapacity)
	}
	if l := s.learning; l.learning > 0 {
		fmt.Fprintf(w, "  learning mode     in %d of %d reads of the key, until %s: the database may have lost state (a failover, a restore or "+
			"a server restart), so each node was granted no more than it held (design §10)\n",
			l.learning, l.frames, l.until.Local().Format("15:04:05"))
	}
	fmt.Fprintf(w, "  rate-limited      %d 429s = %s of %d requests sent\n", st.Rejected, ratio(float64(st.Rejected), float64(sent)), sent)
	fmt.Fprintf(w, "  max concurrency   %d at the provider (capacity at most %d)\n", st.MaxConcurrency, s.maxCapacity)
	fmt.Fprintf(w, "  over capacity     %.2fs of %.1fs (%s)\n", st.OverCapacity.Seconds(), secs, ratio(st.OverCapacity.Seconds(), secs))
	fmt.Fprintf(w, "  per node\n")
	t := newTable(w, "    NODE", "MEAN SHARE", "LAST SHARE", "SUCCESSES", "429S", "MAX IN FLIGHT", "REFUSED")
	for _, n := range s.nodes {
		t.row("    "+n.id, strconv.FormatFloat(n.meanShare, 'f', 1, 64), strconv.Itoa(n.lastShare),
			strconv.FormatInt(n.successes, 10), strconv.FormatInt(n.rejected, 10),
			strconv.Itoa(n.maxConcurrency), strconv.FormatInt(n.refused, 10))
	}
	_ = t.flush()
	var failed int64
	for _, n := range s.nodes {
		failed += n.failed
	}
	if failed > 0 {
		fmt.Fprintf(w, "  errors            %d requests failed (not 200 or 429)\n", failed)
	}
}

// ratio formats a/b as a percentage, "-" when b is 0.
func ratio(a, b float64) string {
	if b <= 0 {
		return "-"
	}
	return strconv.FormatFloat(a/b*100, 'f', 1, 64) + "%"
}
