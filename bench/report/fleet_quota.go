package report

import (
	"fmt"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit/bench"
)

// quotaFirst is the length of the window after the start and after each
// capacity step that renderQuotaUse shows apart from the rest of the
// phase: how fast a way finds the new capacity.
const quotaFirst = time.Second

// quotaWindow is one window of renderQuotaUse's table.
type quotaWindow struct {
	name     string
	from, to time.Duration
}

// quotaWindows cuts sc's run into the first quotaFirst after the start
// and after each capacity step, and the rest of each phase.
func quotaWindows(sc bench.FleetScenario) []quotaWindow {
	steps := sc.Steps()
	var ws []quotaWindow
	for i, st := range steps {
		end := sc.Duration
		if i+1 < len(steps) {
			end = steps[i+1].At
		}
		first := min(st.At+quotaFirst, end)
		ws = append(ws, quotaWindow{fmt.Sprintf("%.0f–%.0f s (%s)", st.At.Seconds(), first.Seconds(), stepKind(steps, i)), st.At, first})
		if first < end {
			ws = append(ws, quotaWindow{fmt.Sprintf("%.0f–%.0f s", first.Seconds(), end.Seconds()), first, end})
		}
	}
	return ws
}

// renderQuotaUse renders how full each way kept the quota, window by
// window (bench.FleetResult.QuotaUsed), medians over the runs.
func renderQuotaUse(sc bench.FleetScenario, runs []fleetRun) string {
	ws := quotaWindows(sc)
	t := &table{header: []string{"way"}, align: []byte("l")}
	for _, w := range ws {
		t.header, t.align = append(t.header, w.name), append(t.align, 'r')
	}
	for _, r := range runs {
		if r.skipped != "" {
			continue
		}
		row := []string{r.way.String()}
		for _, w := range ws {
			row = append(row, fmt.Sprintf("%.2f", median(metric(r.runs, func(x bench.FleetResult) float64 { return x.QuotaUsed(w.from, w.to) }))))
		}
		t.add(row...)
	}
	var b strings.Builder
	fmt.Fprintf(&b, `
**Where the quota goes.** How full each way kept the provider's quota,
window by window: the mean over the window's %v samples of the attempted
in-flight, capped at the capacity then, ÷ that capacity (median over the
runs; 1.00 is a quota full all the time). A request refused at once
counts too while it is out, so a way that over-admits reads full: read
it with the 429s. Goodput follows it, less the HTTP stack's share of each
round trip. The first %.0f s after the start
and after each step (start, halving, doubling) shows how fast a way finds
the new capacity, the rest of each phase how well it holds it.

`, sc.SampleEvery, quotaFirst.Seconds())
	b.WriteString(t.String())
	return b.String()
}
