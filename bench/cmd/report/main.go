// Command report runs fleetlimit's benchmark comparisons and writes
// benchmarks.md and its plots:
//
//	cd bench && go run ./cmd/report -out ../docs
//
// Flags:
//
//	-out DIR     where benchmarks.md and img/ go (default ../docs)
//	-seeds N     seeds of the model comparison (default 100)
//	-quick       a smoke run for CI: 20 seeds, short benchmarks
//	-runs N      runs of each way in the fleet and liveness sections
//	             (default 5, or 1 with -quick)
//	-only NAME   run one section: model, overhead, fleet, fleet8,
//	             fleet-latency, liveness, fleet400 or rates
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"strings"
	"time"

	"github.com/fleetlimit/fleetlimit/bench/report"
)

func main() {
	fs := flag.NewFlagSet("report", flag.ExitOnError)
	out := fs.String("out", "../docs", "directory to write benchmarks.md and img/ into")
	seeds := fs.Int("seeds", 0, "seeds of the model comparison (default 100, or 20 with -quick)")
	quick := fs.Bool("quick", false, "smoke run: fewer seeds, short benchmarks")
	runs := fs.Int("runs", 0, "runs of each way in the fleet and liveness sections (default 5, or 1 with -quick)")
	only := fs.String("only", "", "run one section: "+strings.Join(report.SectionNames(), "|"))
	_ = fs.Parse(os.Args[1:])
	if *runs < 0 {
		fmt.Fprintf(os.Stderr, "report: -runs %d: want ≥ 1, or 0 for the default\n", *runs)
		os.Exit(2)
	}

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	start := time.Now()
	err := report.Run(ctx, report.Options{
		Out:       *out,
		Seeds:     *seeds,
		Quick:     *quick,
		Only:      *only,
		FleetRuns: *runs,
		Log:       os.Stderr,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Fprintf(os.Stderr, "wrote %s/%s in %v\n", *out, report.DocFile, time.Since(start).Round(time.Second))
}
