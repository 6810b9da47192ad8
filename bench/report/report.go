// Package report runs fleetlimit's benchmark comparisons and writes them
// as docs/benchmarks.md plus plots under docs/img. cmd/report is its thin
// command-line front end.
//
// Each comparison is a section with a name (model, overhead, fleet) and a
// function that measures and renders it. A run either measures every
// section or, with Options.Only, one of them; the other sections' text is
// then kept from the existing benchmarks.md, between its
// "<!-- BEGIN section:NAME -->" and "<!-- END section:NAME -->" markers.
package report

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit/bench"
)

// DocFile is the name of the Markdown report inside Options.Out.
const DocFile = "benchmarks.md"

// ImgDir is the directory, relative to Options.Out, the plots go to.
const ImgDir = "img"

// Options configures Run. The zero value is not valid: Out is required.
type Options struct {
	// Out is the directory benchmarks.md and img/ are written to; it must
	// exist.
	Out string
	// Seeds is how many seeds the model comparison runs (seeds 0…Seeds−1)
	// and how many tuning seeds the selection grid runs (1000…).
	// Defaults to 100, or 20 with Quick. Must be >= 0.
	Seeds int
	// Quick makes a smoke run for CI: 20 seeds, benchmarks of 100ms run
	// once. Its numbers are rough.
	Quick bool
	// Only, when not empty, runs that section alone; SectionNames lists
	// the names.
	Only string
	// BenchTime is how long each overhead benchmark runs. Defaults to 1s,
	// or 100ms with Quick.
	BenchTime time.Duration
	// BenchRuns is how many times each overhead benchmark runs; the report
	// shows the median. Defaults to 5, or 1 with Quick.
	BenchRuns int
	// FleetDuration is how long each way of the fleet comparison runs; the
	// capacity halves after a third of it and doubles back after two
	// thirds. Defaults to bench.DefaultFleetScenario's (18s), or 6s with
	// Quick. Must be 0 or ≥ 3s.
	FleetDuration time.Duration
	// FleetRuns is how many times each way of the fleet sections runs,
	// and each liveness measurement. Defaults to 5, or 1 with Quick: a
	// fleet run's 429 share varies by a third from run to run on a shared
	// machine, so the median of 3 can land on either side of a target.
	// Must be ≥ 0.
	FleetRuns int
	// Log receives progress lines. Defaults to io.Discard.
	Log io.Writer
	// Now is the clock for the report's date. Defaults to time.Now.
	Now func() time.Time
}

// section is one comparison of the report.
type section struct {
	name  string
	title string
	// fleetRuns is whether Options.FleetRuns counts the section's runs.
	fleetRuns bool
	// run measures the comparison and returns its Markdown, heading
	// included. It may write plots under env.imgDir.
	run func(ctx context.Context, env *env) (string, error)
}

// sections lists the report's comparisons in document order. A new
// comparison is a new entry here.
var sections = []section{
	{name: "model", title: "1. Control quality on the latent-capacity model", run: runModel},
	{name: "overhead", title: "2. Overhead per request", run: runOverhead},
	{name: "fleet", title: "3. Fleet: four nodes sharing one provider", fleetRuns: true, run: runFleet},
	{name: "fleet8", title: "4. Fleet: eight nodes of unequal demand", fleetRuns: true, run: runFleetUnequal},
	{name: "fleet-latency", title: "5. Fleet: a provider whose latency grows with its load", fleetRuns: true, run: runFleetLatency},
	{name: "liveness", title: "6. Liveness", fleetRuns: true, run: runLiveness},
	{name: "fleet400", title: "7. Fleet: four nodes at C = 400", fleetRuns: true, run: runFleet400},
	{name: "rates", title: "8. Rate budgets", run: runRates},
}

// SectionNames returns the names Options.Only accepts.
func SectionNames() []string {
	names := make([]string, len(sections))
	for i, s := range sections {
		names[i] = s.name
	}
	return names
}

// env is what a section needs to run.
type env struct {
	opts    Options
	imgDir  string
	log     io.Writer
	date    string
	machine string
	// command is the command that reproduces the section.
	command string
}

func (e *env) logf(format string, args ...any) {
	fmt.Fprintf(e.log, format+"\n", args...)
}

// withDefaults fills in Options' defaults and validates them.
func (o Options) withDefaults() (Options, error) {
	if o.Out == "" {
		return o, errors.New("report: Options.Out is required")
	}
	if o.Seeds < 0 {
		return o, fmt.Errorf("report: Options.Seeds = %d, want >= 0", o.Seeds)
	}
	if o.Seeds == 0 {
		o.Seeds = defaultSeeds(o.Quick)
	}
	if o.Only != "" && !isSection(o.Only) {
		return o, fmt.Errorf("report: Options.Only = %q, want one of %s", o.Only, strings.Join(SectionNames(), ", "))
	}
	if o.BenchTime < 0 {
		return o, fmt.Errorf("report: Options.BenchTime = %v, want >= 0", o.BenchTime)
	}
	if o.BenchTime == 0 {
		o.BenchTime = time.Second
		if o.Quick {
			o.BenchTime = 100 * time.Millisecond
		}
	}
	if o.BenchRuns < 0 {
		return o, fmt.Errorf("report: Options.BenchRuns = %d, want >= 0", o.BenchRuns)
	}
	if o.BenchRuns == 0 {
		o.BenchRuns = 5
		if o.Quick {
			o.BenchRuns = 1
		}
	}
	if o.FleetDuration != 0 && o.FleetDuration < 3*time.Second {
		return o, fmt.Errorf("report: Options.FleetDuration = %v, want 0 or ≥ 3s", o.FleetDuration)
	}
	if o.FleetDuration == 0 {
		o.FleetDuration = bench.DefaultFleetScenario().Duration
		if o.Quick {
			o.FleetDuration = 6 * time.Second
		}
	}
	if o.FleetRuns < 0 {
		return o, fmt.Errorf("report: Options.FleetRuns = %d, want >= 0", o.FleetRuns)
	}
	if o.FleetRuns == 0 {
		o.FleetRuns = defaultFleetRuns(o.Quick)
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	if o.Now == nil {
		o.Now = time.Now
	}
	return o, nil
}

func isSection(name string) bool {
	for _, s := range sections {
		if s.name == name {
			return true
		}
	}
	return false
}

// Run measures the selected sections and writes Out/benchmarks.md and the
// plots under Out/img. Sections not run keep their text from an existing
// benchmarks.md. It returns the first error; benchmarks.md is written
// only when every selected section succeeded.
func Run(ctx context.Context, opts Options) error {
	opts, err := opts.withDefaults()
	if err != nil {
		return err
	}
	if fi, err := os.Stat(opts.Out); err != nil || !fi.IsDir() {
		return fmt.Errorf("report: Options.Out %q is not a directory", opts.Out)
	}
	imgDir := filepath.Join(opts.Out, ImgDir)
	if err := os.MkdirAll(imgDir, 0o755); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	docPath := filepath.Join(opts.Out, DocFile)
	old, err := readBlocks(docPath)
	if err != nil {
		return err
	}

	base := &env{
		opts:    opts,
		imgDir:  imgDir,
		log:     opts.Log,
		date:    opts.Now().UTC().Format("2006-01-02"),
		machine: machine(),
	}
	blocks := make(map[string]string)
	for _, s := range sections {
		if opts.Only != "" && opts.Only != s.name {
			continue
		}
		e := *base
		e.command = sectionCommand(s, opts)
		start := time.Now()
		e.logf("== %s", s.name)
		md, err := s.run(ctx, &e)
		if err != nil {
			return fmt.Errorf("report: section %s: %w", s.name, err)
		}
		e.logf("== %s done in %v", s.name, time.Since(start).Round(time.Millisecond))
		blocks[s.name] = md
	}

	var doc strings.Builder
	doc.WriteString(header)
	for _, s := range sections {
		md, ok := blocks[s.name]
		if !ok {
			md, ok = old[s.name]
		}
		if !ok {
			md = fmt.Sprintf("## %s\n\nNot measured yet: run `cd bench && go run ./cmd/report -only %s -out ../docs`.\n", s.title, s.name)
		}
		fmt.Fprintf(&doc, "\n%s\n%s\n%s\n", beginMarker(s.name), strings.TrimSpace(md), endMarker(s.name))
	}
	if err := os.WriteFile(docPath, []byte(doc.String()), 0o644); err != nil {
		return fmt.Errorf("report: %w", err)
	}
	return nil
}

// sectionCommand is the command that reproduces section s with opts.
func sectionCommand(s section, opts Options) string {
	cmd := "cd bench && go run ./cmd/report -only " + s.name
	if opts.Quick {
		cmd += " -quick"
	}
	if s.name == "model" && opts.Seeds != defaultSeeds(opts.Quick) {
		cmd += fmt.Sprintf(" -seeds %d", opts.Seeds)
	}
	if s.fleetRuns && opts.FleetRuns != defaultFleetRuns(opts.Quick) {
		cmd += fmt.Sprintf(" -runs %d", opts.FleetRuns)
	}
	return cmd + " -out ../docs"
}

// defaultSeeds is Options.Seeds's default.
func defaultSeeds(quick bool) int {
	if quick {
		return 20
	}
	return 100
}

// defaultFleetRuns is Options.FleetRuns's default.
func defaultFleetRuns(quick bool) int {
	if quick {
		return 1
	}
	return 5
}

const header = `# Benchmarks

This file is generated: every table and plot below comes from

` + "```sh\ncd bench && go run ./cmd/report -out ../docs\n```" + `

(about 45 minutes on 2 cores; the fleet, liveness and rate sections start a
throwaway Postgres from the ` + "`initdb`/`postgres`" + ` binaries on PATH and use
only 127.0.0.1). Each section names the command that
reproduces it alone, the date and the machine it was measured on; a
section measured on its own (` + "`-only NAME`" + `) replaces just its part of
this file, so sections may come from different runs: within a section,
every way ran in the same run. ` + "`-runs N`" + ` sets how many times each way of
the fleet sections, and each liveness measurement, runs (default 5, or 1
with ` + "`-quick`" + `). ` + "`-quick`" + ` makes a smoke run with fewer seeds and
shorter benchmarks, whose numbers are rough. The code is in ` + "`bench/`" + `, a
separate Go module so that the peer libraries and the plotting library stay
out of fleetlimit's own go.mod.
`

func beginMarker(name string) string { return "<!-- BEGIN section:" + name + " -->" }
func endMarker(name string) string   { return "<!-- END section:" + name + " -->" }

// readBlocks returns the sections' Markdown from an existing report, by
// name; a missing file gives an empty map.
func readBlocks(path string) (map[string]string, error) {
	blocks := make(map[string]string)
	data, err := os.ReadFile(path)
	if errors.Is(err, os.ErrNotExist) {
		return blocks, nil
	}
	if err != nil {
		return nil, fmt.Errorf("report: %w", err)
	}
	text := string(data)
	for _, s := range sections {
		b, e := beginMarker(s.name), endMarker(s.name)
		i := strings.Index(text, b)
		j := strings.Index(text, e)
		if i < 0 || j < i {
			continue
		}
		blocks[s.name] = strings.TrimSpace(text[i+len(b) : j])
	}
	return blocks, nil
}

// machine describes the machine the report runs on.
func machine() string {
	cpu := cpuModel()
	if cpu == "" {
		cpu = "unknown CPU"
	}
	return fmt.Sprintf("%s, %d cores (GOMAXPROCS %d), %s/%s, %s",
		cpu, runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.GOOS, runtime.GOARCH, runtime.Version())
}

// cpuModel returns the CPU's model name from /proc/cpuinfo, or "".
func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return ""
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		k, v, ok := strings.Cut(sc.Text(), ":")
		if ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return ""
}

// loadAverage returns the 1-minute load average from /proc/loadavg, or "".
func loadAverage() string {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return ""
	}
	fields := strings.Fields(string(data))
	if len(fields) == 0 {
		return ""
	}
	return fields[0]
}
