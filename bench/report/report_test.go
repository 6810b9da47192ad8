package report

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/bench"
)

var fixedNow = func() time.Time { return time.Date(2026, 11, 22, 0, 0, 0, 0, time.UTC) }

func readDoc(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, DocFile))
	require.NoError(t, err)
	return string(data)
}

// TestRunSectionsSplice runs sections one at a time into one directory:
// each run replaces its own section and keeps the others. (The fleet
// section is left out: it takes tens of seconds; TestRenderFleet covers
// its rendering.)
func TestRunSectionsSplice(t *testing.T) {
	dir := t.TempDir()
	ctx := context.Background()

	require.NoError(t, Run(ctx, Options{Out: dir, Only: "overhead", BenchTime: time.Millisecond, BenchRuns: 1, Now: fixedNow}))
	doc := readDoc(t, dir)
	require.Contains(t, doc, "| clock floor: two time.Now() |")
	require.Contains(t, doc, "| failsafe-go | parallel |")
	require.Contains(t, doc, "Not measured yet: run `cd bench && go run ./cmd/report -only model -out ../docs`")
	require.Contains(t, doc, "Not measured yet: run `cd bench && go run ./cmd/report -only fleet -out ../docs`")
	for _, name := range SectionNames() {
		require.Equal(t, 1, strings.Count(doc, beginMarker(name)), name)
		require.Equal(t, 1, strings.Count(doc, endMarker(name)), name)
	}

	require.NoError(t, Run(ctx, Options{Out: dir, Only: "model", Seeds: 3, Now: fixedNow}))
	doc = readDoc(t, dir)
	require.Contains(t, doc, "| clock floor: two time.Now() |", "the overhead section survives")
	require.Contains(t, doc, "Not measured yet: run `cd bench && go run ./cmd/report -only fleet -out ../docs`", "so does the fleet placeholder")
	require.Contains(t, doc, "| fleetlimit gradient2, model config |")
	require.Contains(t, doc, "Measured 2026-11-22 on ")
	require.Contains(t, doc, "cd bench && go run ./cmd/report -only model -seeds 3 -out ../docs")
	for _, img := range []string{modelTraceImage, modelGridImage} {
		fi, err := os.Stat(filepath.Join(dir, ImgDir, img))
		require.NoError(t, err)
		require.Positive(t, fi.Size())
	}
	for _, name := range SectionNames() {
		require.Equal(t, 1, strings.Count(doc, beginMarker(name)), name)
	}
}

// fakeFleetResult is a hand-made run of way: capacity 40 → 20 → 40 over
// 3 s, the fleet's in-flight following it after 100 ms.
func fakeFleetResult(way bench.FleetWay) bench.FleetResult {
	sc := bench.DefaultFleetScenario()
	sc.Duration, sc.Settle = 3*time.Second, 100*time.Millisecond
	r := bench.FleetResult{Way: way, Scenario: sc, Elapsed: sc.Duration,
		Sent: 1000, Succeeded: 900, Rejected: 90, Failed: 10, NodeSucceeded: []int64{200, 200, 250, 250},
		Latencies:    []time.Duration{20 * time.Millisecond, 21 * time.Millisecond, 30 * time.Millisecond},
		PeakInflight: 42, PeakRatio: 2.1, PeakAt: time.Second, SteadyPeakRatio: 1.05, OuterPeakRatio: 1.08, OverCapacity: 150 * time.Millisecond,
		ServerSuccesses: 901, ServerRejected: 90}
	for at := 10 * time.Millisecond; at <= sc.Duration; at += 10 * time.Millisecond {
		c := sc.CapacityAt(at - 1)
		in := float64(sc.CapacityAt(max(at-100*time.Millisecond, 0)))
		r.Series = append(r.Series, bench.FleetSample{At: at, Capacity: c, Inflight: in, LGlobal: int(in) + 1,
			MeanEstimate: in, Drops: uint64(at / (100 * time.Millisecond)), Succeeded: 10, Rejected: 1})
	}
	return r
}

func TestRenderFleet(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	e := &env{opts: Options{FleetDuration: 3 * time.Second}, imgDir: dir, date: "2026-11-22", machine: "test machine",
		command: "cd bench && go run ./cmd/report -only fleet -out ../docs"}
	sc := fleetScenario(e.opts)
	e.opts.FleetRuns = 1
	var runs []fleetRun
	for _, way := range bench.FleetWays() {
		if way == bench.Fleetlimit {
			runs = append(runs, fleetRun{way: way, skipped: "Postgres is not installed here"})
			continue
		}
		res := fakeFleetResult(way)
		run := fleetRun{way: way, runs: []bench.FleetResult{res}}
		require.NoError(t, plotFleet(filepath.Join(dir, fleetImage("fleet", way)), res))
		fi, err := os.Stat(filepath.Join(dir, fleetImage("fleet", way)))
		require.NoError(t, err)
		require.Positive(t, fi.Size())
		runs = append(runs, run)
	}
	props, err := renderLimiterProperties(sc, runs)
	require.NoError(t, err)
	require.Contains(t, props, "*A 429 burst*")
	md := renderFleet(e, sc, runs, fleetSection{prefix: "fleet", title: "3. Fleet: four nodes sharing one provider", full: true, props: props, load: "1.00"}, 5*time.Second)
	require.Contains(t, md, "## 3. Fleet: four nodes sharing one provider")
	require.Contains(t, md, "Measured 2026-11-22 on test machine")
	require.Contains(t, md, "| static C/N | 300 | 18.0 % | 9.00 | 2.10 | 1.08 | 1.05 | 5 | 21.0 | 29.8 | 0.988 | not within the phase | not within the phase |")
	require.Contains(t, md, "| fleetlimit | not measured |")
	require.Contains(t, md, "- not measured: Postgres is not installed here.")
	require.Contains(t, md, "| independent adaptive | 30 of 30 | 10 | 10 | 40.0 → 20.0 after 100 ms (13.5) | 40.0 → 20.0 at 1.00 s (13.5) | 20.0 → 38.2 | 10 |", "the diagnosis table")
	// Where the quota goes: the in-flight follows each step 100 ms late,
	// so only the doubling's first 100 ms run at half the quota.
	require.Contains(t, md, "| way | 0–1 s (start) | 1–2 s (halving) | 2–3 s (doubling) |")
	require.Contains(t, md, "| static C/N | 1.00 | 1.00 | 0.95 |")
	require.Contains(t, md, "![static C](img/fleet-static-c.png)")
	require.NotContains(t, md, "fleet-fleetlimit.png")
	require.NotContains(t, md, "%!", "no formatting errors")

	// Three runs: medians with ranges, and the plotted run is the median.
	slow, fast := fakeFleetResult(bench.StaticSplit), fakeFleetResult(bench.StaticSplit)
	slow.Succeeded, fast.Succeeded = 600, 1200
	three := fleetRun{way: bench.StaticSplit, runs: []bench.FleetResult{fast, fakeFleetResult(bench.StaticSplit), slow}}
	require.Equal(t, 1, three.rep())
	e.opts.FleetRuns = 3
	md = renderFleet(e, sc, []fleetRun{three}, fleetSection{prefix: "fleet", title: "3. Fleet"}, time.Second)
	require.Contains(t, md, "| static C/N | 300 (200–400) | 18.0 % |")
	require.NotContains(t, md, "%!", "no formatting errors")

	// The unequal fleet: its demand in the setup, its own plots.
	sc.Nodes, sc.Workers = 3, []int{5, 2, 1}
	md = renderFleet(e, sc, []fleetRun{three}, fleetSection{prefix: "fleet8", title: "4. Fleet: unequal"}, time.Second)
	require.Contains(t, md, "The nodes run 5, 2, 1 closed-loop workers (demand 8,")
	require.Contains(t, md, "fleet8-static-cn.png")
	require.NotContains(t, md, "%!", "no formatting errors")
}

// TestRenderFleetCarried: the targets say when the requests sent before
// the halving alone outlast its first heartbeat above the peak target,
// with each run's ratio, and say nothing of it otherwise.
func TestRenderFleetCarried(t *testing.T) {
	t.Parallel()
	e := &env{opts: Options{FleetDuration: 3 * time.Second, FleetRuns: 3}, imgDir: t.TempDir(), date: "2026-11-22", machine: "test machine",
		command: "cd bench && go run ./cmd/report -only fleet400 -out ../docs"}
	sc := fleetScenario(e.opts)
	render := func(carried ...float64) string {
		run := fleetRun{way: bench.Fleetlimit}
		for _, c := range carried {
			res := fakeFleetResult(bench.Fleetlimit)
			res.OuterPeakRatio, res.CarriedRatio = 1.5, c
			run.runs = append(run.runs, res)
		}
		md := renderFleet(e, sc, []fleetRun{run}, fleetSection{prefix: "fleet400", title: "7. Fleet"}, time.Second)
		require.NotContains(t, md, "%!", "no formatting errors")
		return md
	}
	md := render(1.3, 1.45, 0.9)
	require.Contains(t, md, "  At the end of that heartbeat the requests sent before the halving were still 1.30·C (median over the runs; 1.30·C, 1.45·C, 0.90·C in each): they outlasted the heartbeat, so")
	require.NotContains(t, render(1.05, 1.1, 0.2), "sent before the halving were still")
	sc.BaseLatency = 200 * time.Millisecond // section 7's, two heartbeats
	require.Contains(t, render(1.3, 1.45, 0.9), "in each): a request takes 200ms here, longer than the heartbeat, so")
}

func TestSummarizeConvergence(t *testing.T) {
	t.Parallel()
	c := func(s float64, ok bool) convergence {
		return convergence{after: time.Duration(s * float64(time.Second)), ok: ok}
	}
	require.Equal(t, "0.50 s", summarizeConvergence([]convergence{c(0.5, true)}))
	require.Equal(t, "0.50 s (0.20–0.90)", summarizeConvergence([]convergence{c(0.9, true), c(0.2, true), c(0.5, true)}))
	require.Equal(t, "0.90 s (2/3 runs converged)", summarizeConvergence([]convergence{c(0.9, true), c(0, false), c(0.5, true)}))
	require.Equal(t, "not within the phase (1/3 runs did)", summarizeConvergence([]convergence{c(0, false), c(0, false), c(0.5, true)}))
	require.Equal(t, "not within the phase", summarizeConvergence([]convergence{c(0, false)}))
}

func TestOptionsValidate(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"no out", Options{}, "Options.Out is required"},
		{"bad only", Options{Out: "x", Only: "nope"}, `Options.Only = "nope"`},
		{"negative seeds", Options{Out: "x", Seeds: -1}, "Options.Seeds = -1"},
		{"negative bench time", Options{Out: "x", BenchTime: -1}, "Options.BenchTime"},
		{"negative bench runs", Options{Out: "x", BenchRuns: -1}, "Options.BenchRuns"},
		{"negative fleet runs", Options{Out: "x", FleetRuns: -1}, "Options.FleetRuns = -1"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			_, err := tc.opts.withDefaults()
			require.ErrorContains(t, err, tc.want)
		})
	}
	o, err := Options{Out: "x", Quick: true}.withDefaults()
	require.NoError(t, err)
	require.Equal(t, 20, o.Seeds)
	require.Equal(t, 1, o.BenchRuns)
	require.Equal(t, 100*time.Millisecond, o.BenchTime)
	require.Equal(t, 1, o.FleetRuns)
	for _, tc := range []struct {
		opts Options
		want int
	}{
		{Options{Out: "x"}, 5},
		{Options{Out: "x", FleetRuns: 2}, 2},
		{Options{Out: "x", FleetRuns: 2, Quick: true}, 2},
	} {
		o, err := tc.opts.withDefaults()
		require.NoError(t, err)
		require.Equal(t, tc.want, o.FleetRuns, "%+v", tc.opts)
	}
	for _, tc := range []struct {
		name string
		opts Options
		want string
	}{
		{"fleet400", Options{FleetRuns: 5}, "cd bench && go run ./cmd/report -only fleet400 -out ../docs"},
		{"fleet400", Options{FleetRuns: 3}, "cd bench && go run ./cmd/report -only fleet400 -runs 3 -out ../docs"},
		{"liveness", Options{FleetRuns: 1, Quick: true}, "cd bench && go run ./cmd/report -only liveness -quick -out ../docs"},
		{"model", Options{FleetRuns: 3, Seeds: 100}, "cd bench && go run ./cmd/report -only model -out ../docs"},
		{"model", Options{Seeds: 20, Quick: true}, "cd bench && go run ./cmd/report -only model -quick -out ../docs"},
		{"model", Options{Seeds: 100, Quick: true}, "cd bench && go run ./cmd/report -only model -quick -seeds 100 -out ../docs"},
		{"model", Options{Seeds: 20}, "cd bench && go run ./cmd/report -only model -seeds 20 -out ../docs"},
	} {
		i := slices.IndexFunc(sections, func(s section) bool { return s.name == tc.name })
		require.NotEqual(t, -1, i, tc.name)
		require.Equal(t, tc.want, sectionCommand(sections[i], tc.opts))
	}

	require.ErrorContains(t, Run(context.Background(), Options{Out: filepath.Join(t.TempDir(), "missing")}), "is not a directory")
}

func TestTable(t *testing.T) {
	t.Parallel()
	tb := &table{header: []string{"a", "b"}, align: []byte("lr")}
	tb.add("x|y", "1")
	tb.add("z")
	require.Equal(t, "| a | b |\n|---|---:|\n| x\\|y | 1 |\n| z |  |\n", tb.String())
}

func TestFleetFindingsOuterPeak(t *testing.T) {
	sc := bench.DefaultFleetScenario()
	require.Equal(t, "0.46 s, after the start", phaseOf(sc, 460*time.Millisecond))
	require.Equal(t, "6.15 s, 0.15 s after the halving", phaseOf(sc, 6150*time.Millisecond))
	require.Equal(t, "13.00 s, 1.00 s after the doubling", phaseOf(sc, 13*time.Second))

	runs := func(ratios ...float64) []fleetRun {
		r := fleetRun{way: bench.Fleetlimit}
		for i, x := range ratios {
			r.runs = append(r.runs, bench.FleetResult{Way: bench.Fleetlimit, Scenario: sc, OuterPeakRatio: x, OuterPeakAt: time.Duration(i+1) * 6100 * time.Millisecond})
		}
		return []fleetRun{r}
	}
	md := fleetFindings(sc, runs(1.2, 1.25, 1.05))
	require.Contains(t, md, "Why the outer peak stays above 1.10·C")
	require.Contains(t, md, "At C = 20, 3 slots over C at once are 1.15·C.")
	require.Contains(t, md, "fleetlimit's outer peak in each run: 1.20·C at 6.10 s, 0.10 s after the halving; 1.25·C at 12.20 s, 0.20 s after the doubling; 1.05·C at 18.30 s, 6.30 s after the doubling.")
	require.NotContains(t, fleetFindings(sc, runs(1.1, 1.05, 1.2)), "Why the outer peak", "a median within the bound needs no explanation")
}
