package cli

import (
	"bytes"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
	"time"
)

// frame is one refresh of a key's view, shared by watch and demo.
type frame struct {
	Time  time.Time
	Key   keyView
	Nodes []nodeView
	// Provider is the simulated provider's side; only demo has one.
	Provider *providerView
	// Note is a line the live view shows under its title: watch's word
	// that it refreshes again after failed refreshes, which went to
	// stderr and would be cleared by the redraw at once.
	Note string
}

// providerView is what the demo's simulated provider shows.
type providerView struct {
	Capacity  float64
	Current   int
	Successes int64
	Rejected  int64
}

// watchLine is one line of watch -o json: the time, every field of a keys
// object and the nodes. Its JSON form is a stable interface.
type watchLine struct {
	Time time.Time `json:"time"`
	keyView
	Nodes []nodeView `json:"nodes"`
}

// plainLine formats f as one line, for output that is not a terminal.
func plainLine(f frame) string {
	var b strings.Builder
	fmt.Fprintf(&b, "%s key=%s l_global=%s nodes=%d share=%d inflight=%d util=%s",
		f.Time.UTC().Format("2006-01-02T15:04:05.000Z"), strconv.Quote(f.Key.Key), lGlobal(f.Key.LGlobal),
		f.Key.LiveNodes, f.Key.SumShare, f.Key.SumInflight, percent(f.Key.Utilization))
	if u := f.Key.LearningUntil; u != nil {
		fmt.Fprintf(&b, " learning_until=%s", u.UTC().Format("2006-01-02T15:04:05.000Z"))
	} else if f.Key.Unchecked {
		b.WriteString(" unchecked")
	}
	if f.Key.HeldRows > 0 {
		fmt.Fprintf(&b, " held=%d held_rows=%d", f.Key.HeldReserve, f.Key.HeldRows)
	}
	if k := f.Key; k.hasRates() {
		fmt.Fprintf(&b, " rpm=%s tpm=%s rate_share=%s", optInt64(k.RPM), optInt64(k.TPM), sharePair(k.SumRPMShare, k.SumTPMShare, k.rateDims()))
	}
	if p := f.Provider; p != nil {
		fmt.Fprintf(&b, " capacity=%s provider_inflight=%d ok=%d 429=%d",
			fmtNum(p.Capacity), p.Current, p.Successes, p.Rejected)
	}
	return b.String()
}

// history keeps the last width samples of the series the live view charts.
type history struct {
	width                       int
	lGlobal, inflight, capacity []float64
}

func newHistory(width int) *history { return &history{width: max(width, 1)} }

func (h *history) add(f frame) {
	push := func(s []float64, v float64) []float64 {
		s = append(s, v)
		if len(s) > h.width {
			s = s[len(s)-h.width:]
		}
		return s
	}
	h.lGlobal = push(h.lGlobal, float64(f.Key.LGlobal))
	h.inflight = push(h.inflight, float64(f.Key.SumInflight))
	if f.Provider != nil {
		h.capacity = push(h.capacity, f.Provider.Capacity)
	}
}

// sparkBlocks are the eight heights of a sparkline cell; a zero is blank.
var sparkBlocks = []rune("▁▂▃▄▅▆▇█")

// sparkline draws values scaled so that top is a full block.
func sparkline(values []float64, top float64) string {
	var b strings.Builder
	for _, v := range values {
		if v <= 0 || top <= 0 {
			b.WriteByte(' ')
			continue
		}
		i := int(math.Ceil(v/top*float64(len(sparkBlocks)))) - 1
		b.WriteRune(sparkBlocks[min(max(i, 0), len(sparkBlocks)-1)])
	}
	return b.String()
}

// ANSI sequences of the live view.
const (
	ansiClear      = "\x1b[H\x1b[2J"
	ansiHideCursor = "\x1b[?25l"
	ansiShowCursor = "\x1b[?25h"
)

// renderLive draws f, and the chart of h, as one screen: it clears the
// terminal and writes everything in a single Write so the screen does not
// flicker. title is the first line.
func renderLive(w io.Writer, title string, f frame, h *history) error {
	var b bytes.Buffer
	b.WriteString(ansiClear)
	fmt.Fprintf(&b, "%s  %s\n", title, f.Time.Local().Format("15:04:05"))
	if f.Note != "" {
		fmt.Fprintf(&b, "%s\n", f.Note)
	}
	k := f.Key
	fmt.Fprintf(&b, "key %s  L_global %s (min %s, max %s, %s)  nodes %d  Σ share %d  Σ in-flight %d  util %s\n",
		strconv.Quote(k.Key), lGlobal(k.LGlobal), optInt(k.MinLimit), optInt(k.MaxLimit), k.Aggregate,
		k.LiveNodes, k.SumShare, k.SumInflight, percent(k.Utilization))
	switch {
	case k.LearningUntil != nil:
		fmt.Fprintf(&b, "learning mode until %s: each node is granted at most what it holds (the database may have lost state, design §10)\n",
			k.LearningUntil.Local().Format("15:04:05"))
	case k.Unchecked:
		b.WriteString("unchecked: the database may have lost state since the key was last checked; its next heartbeat starts learning mode (design §10)\n")
	}
	switch {
	case k.HeldReserve > 0:
		verb := "hold"
		if k.HeldRows == 1 {
			verb = "holds"
		}
		fmt.Fprintf(&b, "held: %s for requests that may still run; %s of nodes that are gone (expired, left or evicted) %s "+
			"capacity (slots, or an evicted instance's rate share)\n", plural(k.HeldReserve, "slot", "slots"),
			plural(k.HeldRows, "row", "rows"), verb)
	case k.HeldRows == 1: // only an evicted instance whose lease runs holds no slot
		b.WriteString("held: the rate share of 1 evicted instance, until its lease ends\n")
	case k.HeldRows > 1:
		fmt.Fprintf(&b, "held: the rate shares of %d evicted instances, until their leases end\n", k.HeldRows)
	}
	if k.hasRates() {
		fmt.Fprintf(&b, "rates per minute: requests %s  tokens %s  Σ rate share %s\n",
			rateWithLimit(k.RPM, k.RPMLimit), rateWithLimit(k.TPM, k.TPMLimit), sharePair(k.SumRPMShare, k.SumTPMShare, k.rateDims()))
	}
	if p := f.Provider; p != nil {
		fmt.Fprintf(&b, "provider: capacity %s (hidden from the nodes)  in flight %d  ok %d  429 %d\n",
			fmtNum(p.Capacity), p.Current, p.Successes, p.Rejected)
	}
	b.WriteByte('\n')
	if err := writeNodesTable(&b, f.Nodes); err != nil {
		return err
	}
	b.WriteByte('\n')
	top := 0.0
	for _, s := range [][]float64{h.lGlobal, h.inflight, h.capacity} {
		for _, v := range s {
			top = max(top, v)
		}
	}
	row := func(name string, s []float64, last string) {
		if len(s) == 0 {
			return
		}
		fmt.Fprintf(&b, "%-10s %s%s %s\n", name, strings.Repeat(" ", h.width-len(s)), sparkline(s, top), last)
	}
	lastOf := func(s []float64) string {
		if len(s) == 0 {
			return ""
		}
		return fmtNum(s[len(s)-1])
	}
	row("L_global", h.lGlobal, lGlobal(k.LGlobal))
	row("in-flight", h.inflight, lastOf(h.inflight))
	row("capacity", h.capacity, lastOf(h.capacity))
	shown := max(len(h.lGlobal), len(h.inflight), len(h.capacity)) // fewer than width at the start
	fmt.Fprintf(&b, "%-10s scale 0..%s over the last %s\n", "", fmtNum(top), plural(shown, "refresh", "refreshes"))
	_, err := w.Write(b.Bytes())
	return err
}

// chartWidth is how many samples the live view charts: the terminal's
// width ($COLUMNS) minus the row's name and value, at most 120.
func chartWidth(getenv func(string) string) int {
	cols, err := strconv.Atoi(getenv("COLUMNS"))
	if err != nil || cols <= 0 {
		cols = 80
	}
	return min(max(cols-20, 10), 120)
}

// fmtNum formats v as an integer when it is one, else with one decimal.
func fmtNum(v float64) string {
	if v == math.Trunc(v) && math.Abs(v) < 1e15 {
		return strconv.FormatInt(int64(v), 10)
	}
	return strconv.FormatFloat(v, 'f', 1, 64)
}
