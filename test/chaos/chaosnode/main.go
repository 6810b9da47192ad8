// Command chaosnode is one fleet node process for the chaos suite in
// test/chaos: it joins a key through fleet.New, runs -workers goroutines
// that send GET requests to the test's provider through node.Transport, and
// prints one JSON status line to stdout every 100 ms. Requests last a uniform
// [-min-ms, -max-ms], except a fraction -stream-frac of "streams" lasting a
// uniform [-stream-ms, -stream-max-ms]; the duration goes to the provider as
// ?ms=. The local limit is fixed at -limit, so the only thing bounding the
// fleet is the key's operator max.
//
// On SIGTERM or SIGINT it shuts down as README's "Using it from Go" does:
// it cancels the app context (workers start no new request; requests in
// flight are not cancelled), calls node.Stop with -stop-timeout, which waits
// for them, prints Stop's result as a last JSON line and exits 0.
//
// Node logs go to stderr.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/http"
	"net/url"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/fleet"
)

// Status is one line of stdout: the node's state every 100 ms, or, with
// Stopped set, the result of Stop.
type Status struct {
	Time     time.Time `json:"time"`
	Node     string    `json:"node"`
	Share    int       `json:"share"`
	LGlobal  int       `json:"l_global"`
	Inflight int       `json:"inflight"`
	Fenced   bool      `json:"fenced"`
	Status   string    `json:"status"`
	Joined   bool      `json:"joined"`
	Outage   bool      `json:"outage"`
	Error    string    `json:"error,omitempty"`
	// Stopped marks the last line; StopError is Stop's error, "" for nil.
	Stopped   bool   `json:"stopped,omitempty"`
	StopError string `json:"stop_error,omitempty"`
}

func main() {
	var (
		dsn         = flag.String("dsn", "", "Postgres DSN")
		key         = flag.String("key", "", "the shared key")
		id          = flag.String("id", "", "the NodeID")
		provider    = flag.String("provider", "", "the provider's URL")
		workers     = flag.Int("workers", 8, "request loops")
		minMS       = flag.Int("min-ms", 20, "shortest plain request (ms)")
		maxMS       = flag.Int("max-ms", 300, "longest plain request (ms)")
		streamFrac  = flag.Float64("stream-frac", 0, "fraction of requests that are streams")
		streamMS    = flag.Int("stream-ms", 1000, "shortest stream (ms)")
		streamMaxMS = flag.Int("stream-max-ms", 0, "longest stream (ms); defaults to -stream-ms")
		heartbeat   = flag.Duration("heartbeat", 200*time.Millisecond, "fleet.Config.HeartbeatInterval")
		lease       = flag.Duration("lease", time.Second, "fleet.Config.LeaseTTL")
		fenceMargin = flag.Duration("fence-margin", 250*time.Millisecond, "fleet.Config.FenceMargin")
		hbTimeout   = flag.Duration("heartbeat-timeout", 0, "fleet.Config.HeartbeatTimeout (0: the default)")
		maxRequest  = flag.Duration("max-request", 0, "fleet.Config.MaxRequestDuration (0: the default)")
		limit       = flag.Int("limit", 48, "the fixed local estimate")
		stopTimeout = flag.Duration("stop-timeout", 5*time.Second, "bound on node.Stop")
	)
	flag.Parse()
	if *streamMaxMS < *streamMS {
		*streamMaxMS = *streamMS
	}
	log := slog.New(slog.NewTextHandler(os.Stderr, nil))

	// The pool outlives the app context: Stop still needs it to leave.
	pool, err := pgxpool.New(context.Background(), *dsn)
	if err != nil {
		log.Error("pgxpool", "err", err)
		os.Exit(1)
	}
	defer pool.Close()
	node, err := fleet.New(pool, fleet.Config{
		Key:               *key,
		NodeID:            *id,
		HeartbeatInterval: *heartbeat,
		LeaseTTL:          *lease,
		FenceMargin:       *fenceMargin,
		HeartbeatTimeout:  *hbTimeout,

		MaxRequestDuration: *maxRequest,
		Limiter: adaptive.Config{InitialLimit: *limit, MinLimit: *limit, MaxLimit: *limit,
			MaxQueued: *workers},
		Logger: log,
	})
	if err != nil {
		log.Error("fleet.New", "err", err)
		os.Exit(1)
	}

	signals := make(chan os.Signal, 1)
	signal.Notify(signals, syscall.SIGTERM, syscall.SIGINT)
	app, cancel := context.WithCancel(context.Background())
	out := json.NewEncoder(os.Stdout)

	// Status lines, until the last one.
	statusDone := make(chan struct{})
	var statusWG sync.WaitGroup
	statusWG.Go(func() {
		t := time.NewTicker(100 * time.Millisecond)
		defer t.Stop()
		for {
			_ = out.Encode(status(node))
			select {
			case <-statusDone:
				return
			case <-t.C:
			}
		}
	})

	var wg sync.WaitGroup
	if join(app, node, signals) {
		client := &http.Client{Transport: node.Transport(nil)}
		// Requests in flight are not cancelled by the shutdown: the
		// provider keeps serving a request whose client went away, so
		// cancelling would only hide it from the node. The transport still
		// cuts each one at -max-request.
		reqCtx := context.WithoutCancel(app)
		for range *workers {
			wg.Go(func() {
				for app.Err() == nil {
					ms := *minMS + rand.IntN(*maxMS-*minMS+1)
					if rand.Float64() < *streamFrac {
						ms = *streamMS + rand.IntN(*streamMaxMS-*streamMS+1)
					}
					if err := request(reqCtx, client, *provider, *id, ms); err != nil {
						time.Sleep(5 * time.Millisecond)
					}
				}
			})
		}
		<-signals
	}
	cancel()

	stopCtx, stopCancel := context.WithTimeout(context.Background(), *stopTimeout)
	stopErr := node.Stop(stopCtx)
	stopCancel()
	wg.Wait()
	close(statusDone)
	statusWG.Wait()
	last := status(node)
	last.Stopped = true
	if stopErr != nil {
		last.StopError = stopErr.Error()
	}
	_ = out.Encode(last)
}

// join starts the node, retrying every 100 ms until it succeeds (true) or
// a signal arrives (false): the node id may still be held by this node's
// previous process until its lease runs out, or the database may be down.
func join(ctx context.Context, node *fleet.Node, signals <-chan os.Signal) bool {
	for {
		if node.Start(ctx) == nil {
			return true
		}
		select {
		case <-signals:
			return false
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// request sends one request lasting ms and reads its body to EOF.
func request(ctx context.Context, client *http.Client, provider, id string, ms int) error {
	q := url.Values{"ms": {fmt.Sprint(ms)}, "node": {id}}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, provider+"?"+q.Encode(), nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return errors.Join(err, resp.Body.Close())
}

// status is the node's state as a status line.
func status(node *fleet.Node) Status {
	s := node.State()
	st := Status{
		Time:     time.Now(),
		Node:     node.ID(),
		Share:    s.Share,
		LGlobal:  s.LGlobal,
		Inflight: s.Inflight,
		Fenced:   s.Fenced,
		Status:   string(s.Status),
		Joined:   s.Joined,
		Outage:   s.Outage,
	}
	if s.LastError != nil {
		st.Error = s.LastError.Error()
	}
	return st
}
