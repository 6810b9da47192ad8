// Command fleetctl is fleetlimit's operator command line: migrate the
// schema, list keys and nodes, drain, undrain and evict nodes, set a key's
// limits, watch a key live, and run a self-contained demo. Run
// "fleetctl --help"; the commands, the connection precedence, the exit
// statuses and the JSON output are documented in package internal/cli.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"github.com/fleetlimit/fleetlimit/internal/cli"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	code := cli.Run(ctx, os.Args, cli.Env{Stdout: os.Stdout, Stderr: os.Stderr})
	stop()
	os.Exit(code)
}
