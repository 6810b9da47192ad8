package chaos

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/assert"
)

// Sections of the report besides the fault kinds.
const (
	sectionSettled  = "after the last fault"
	sectionRows     = "rows in fleetlimit.nodes after settling"
	sectionShutdown = "graceful shutdown of every node"
)

// checkSettled waits for every node to be joined, unfenced and holding a
// share, then for leftover rows to expire, and checks that only the running
// nodes have rows.
func (r *run) checkSettled(ctx context.Context) {
	deadline := time.Now().Add(20 * time.Second)
	since := time.Now()
	for {
		all := true
		for _, s := range r.slots {
			_, proc := s.current()
			if st := proc.latest(); !st.Time.After(since) || !st.healthy() {
				all = false
			}
		}
		if all || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond)
	}
	r.find(sectionSettled, "%.2fs after the last fault healed:", time.Since(since).Seconds())
	running := map[string]bool{}
	for _, s := range r.slots {
		id, proc := s.current()
		st := proc.latest()
		running[id] = true
		r.find(sectionSettled, "%s: joined %v, fenced %v, outage %v, share %d, l_global %d, status %q, inflight %d",
			id, st.Joined, st.Fenced, st.Outage, st.Share, st.LGlobal, st.Status, st.Inflight)
		assert.True(r.t, st.healthy(), "node %s after the last fault: %+v", id, st)
	}

	// Rows of dead, departed and evicted instances hold for a lease plus
	// the request bound; give them that and two heartbeats. Evicted
	// instances are then recorded in fleetlimit.evictions, not here.
	time.Sleep(r.p.lease + r.p.maxRequest + 2*r.p.heartbeat)
	rows, err := r.nodeRows(ctx)
	if err != nil {
		r.t.Errorf("reading fleetlimit.nodes: %v", err)
		return
	}
	var leaked []string
	for _, row := range rows {
		r.find(sectionRows, "%s", row.String())
		member := row.status == "active" || row.status == "draining"
		if !(member && running[row.id]) {
			leaked = append(leaked, row.id+"/"+row.instance+" "+row.status)
		}
	}
	if len(rows) == 0 {
		r.find(sectionRows, "(none)")
	}
	assert.Empty(r.t, leaked, "rows left in fleetlimit.nodes by nodes that are not running")
}

// nodeRow is one row of fleetlimit.nodes.
type nodeRow struct {
	id, instance, status             string
	share, inflight, lLocal, reserve int
	draining, evicted                bool
	leaseLeft, sinceHeartbeatMS      float64
}

func (n nodeRow) String() string {
	return fmt.Sprintf("%s instance %s status %s share %d inflight %d reserve %d l_local %d draining %v evicted %v lease left %.2fs, last heartbeat %.2fs ago",
		n.id, n.instance, n.status, n.share, n.inflight, n.reserve, n.lLocal, n.draining, n.evicted, n.leaseLeft, n.sinceHeartbeatMS/1000)
}

func (r *run) nodeRows(ctx context.Context) ([]nodeRow, error) {
	var out []nodeRow
	err := r.db.retry(ctx, func(ctx context.Context, pool *pgxpool.Pool) error {
		out = nil
		rows, err := pool.Query(ctx, `
			SELECT node_id, instance, fleetlimit.node_status(n, now()), share, inflight, l_local,
			       CASE WHEN hold_until > now() THEN greatest(unacked_high, share, inflight) ELSE 0 END,
			       draining, evicted,
			       extract(epoch FROM lease_expires_at - now())::float8,
			       extract(epoch FROM now() - heartbeat_at)::float8 * 1000
			  FROM fleetlimit.nodes AS n WHERE key = $1 ORDER BY node_id, instance`, r.key)
		if err != nil {
			return err
		}
		defer rows.Close()
		for rows.Next() {
			var n nodeRow
			if err := rows.Scan(&n.id, &n.instance, &n.status, &n.share, &n.inflight, &n.lLocal, &n.reserve,
				&n.draining, &n.evicted, &n.leaseLeft, &n.sinceHeartbeatMS); err != nil {
				return err
			}
			out = append(out, n)
		}
		return rows.Err()
	})
	return out, err
}

// shutdown stops every node with SIGTERM at once and records how each
// exited and what was left in fleetlimit.nodes.
func (r *run) shutdown() {
	var wg sync.WaitGroup
	for _, s := range r.slots {
		wg.Go(func() {
			s.busy.Lock()
			defer s.busy.Unlock()
			id, proc := s.current()
			begin := time.Now()
			exited := proc.terminate(r.p.stopTimeout + 5*time.Second)
			took := time.Since(begin).Seconds()
			switch final := proc.stopResult(); {
			case !exited:
				r.find(sectionShutdown, "%s did not exit within %v of SIGTERM; killed", id, r.p.stopTimeout+5*time.Second)
				r.t.Errorf("node %s did not exit after SIGTERM", id)
			case final == nil:
				r.find(sectionShutdown, "%s exited %d after %.2fs without a Stop line", id, proc.exitCode(), took)
			case final.StopError != "":
				r.find(sectionShutdown, "%s exited %d after %.2fs, Stop: %s", id, proc.exitCode(), took, final.StopError)
			default:
				r.find(sectionShutdown, "%s exited %d after %.2fs, Stop ok", id, proc.exitCode(), took)
			}
			if exited {
				assert.Zero(r.t, proc.exitCode(), "node %s's exit code after SIGTERM", id)
			}
		})
	}
	wg.Wait()
	rows, err := r.nodeRows(context.Background())
	if err != nil {
		r.t.Errorf("reading fleetlimit.nodes: %v", err)
		return
	}
	r.find(sectionShutdown, "rows left right after: %d", len(rows))
	for _, row := range rows {
		r.find(sectionShutdown, "  %s", row.String())
	}
}

// report renders the run's table, episodes and findings.
func (r *run) report(elapsed time.Duration) string {
	l := r.led
	l.mu.Lock()
	defer l.mu.Unlock()
	var b strings.Builder
	mode := "mixed (overlapping)"
	if r.p.solo {
		mode = "solo (one at a time)"
	}
	fmt.Fprintf(&b, "chaos run: %d faults, %s, in %v (seed %d); M = %d; max provider concurrency %d; %d requests served\n\n",
		len(l.injections), mode, elapsed.Round(time.Second), r.p.seed, r.p.max, r.prov.peak.Load(), r.prov.served.Load())

	type row struct {
		injected, hit, episodes, alone int
		violations, peak               int64
	}
	rows := map[string]*row{}
	for _, kind := range allFaults {
		rows[kind] = &row{}
	}
	for _, inj := range l.injections {
		x := rows[inj.kind]
		x.injected++
		if inj.violations > 0 {
			x.hit++
		}
		x.violations += inj.violations
		x.episodes += inj.episodes
		x.alone += inj.alone
		x.peak = max(x.peak, inj.peak)
	}
	tw := tabwriter.NewWriter(&b, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault\tinjected\twindows with violations\tviolating admissions\tepisodes begun\tof which alone\tpeak in flight\t")
	for _, kind := range allFaults {
		x := rows[kind]
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t\n", kind, x.injected, x.hit, x.violations, x.episodes, x.alone, peak(x.peak))
	}
	unattributedEpisodes := 0
	for _, ep := range l.episodes {
		if len(ep.windows) == 0 {
			unattributedEpisodes++
		}
	}
	fmt.Fprintf(tw, "%s\t\t\t%d\t%d\t\t\t\n", noWindow, l.unattributed, unattributedEpisodes)
	fmt.Fprintf(tw, "total (each counted once)\t%d\t\t%d\t%d\t\t%d\t\n", len(l.injections), l.violations, len(l.episodes), r.prov.peak.Load())
	tw.Flush()
	fmt.Fprintf(&b, "\nA violation is an admission at the provider that took its in-flight count above M = %d; it counts for\n"+
		"every fault window open at the time (a window lasts from the injection until %v after it healed),\n"+
		"so overlapping faults share it. An episode is a run of violations less than %v apart; \"alone\"\n"+
		"counts the episodes that began while this fault's window was the only one open.\n",
		r.p.max, l.tail, episodeGap)

	if len(l.episodes) > 0 {
		fmt.Fprintf(&b, "\nepisodes (first 60):\n")
		for i, ep := range l.episodes {
			if i == 60 {
				fmt.Fprintf(&b, "  ... %d more\n", len(l.episodes)-60)
				break
			}
			windows := strings.Join(ep.windows, ", ")
			if windows == "" {
				windows = noWindow
			}
			fmt.Fprintf(&b, "  %s  peak %d, %d admissions over %.2fs; open: %s\n",
				l.since(ep.start), ep.peak, ep.count, ep.last.Sub(ep.start).Seconds(), windows)
		}
	}

	r.findMu.Lock()
	defer r.findMu.Unlock()
	for _, k := range slices.Sorted(maps.Keys(r.findings)) {
		fmt.Fprintf(&b, "\n%s:\n", k)
		for _, line := range summarize(r.findings[k]) {
			fmt.Fprintf(&b, "  %s\n", line)
		}
	}
	return b.String()
}

func peak(v int64) string {
	if v == 0 {
		return "-"
	}
	return fmt.Sprint(v)
}

// summarize keeps the order of lines but folds repeats into "×n".
func summarize(lines []string) []string {
	counts := map[string]int{}
	var order []string
	for _, l := range lines {
		if counts[l] == 0 {
			order = append(order, l)
		}
		counts[l]++
	}
	out := make([]string, len(order))
	for i, l := range order {
		out[i] = l
		if counts[l] > 1 {
			out[i] = fmt.Sprintf("%s (×%d)", l, counts[l])
		}
	}
	return out
}
