package cli

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/fleet"
)

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestDemoWorkerOutcomes: a request Transport did not send because the
// run's end leaves it less than a round trip (ErrLate) ends the worker
// and counts nowhere; a refused admission counts as refused, and a
// transport error as failed, until the run ends (the second request
// here), which counts nowhere either.
func TestDemoWorkerOutcomes(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name                          string
		err                           error
		endAt, calls, refused, failed int64 // endAt: the call at which the run ends
	}{
		{"late", fmt.Errorf("%w: 1ms of the deadline left", fleet.ErrLate), 3, 1, 0, 0},
		{"refused", adaptive.ErrQueueFull, 2, 2, 1, 0},
		{"failed", fmt.Errorf("dial tcp 127.0.0.1:1: connection refused"), 2, 2, 0, 1},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			ctx, cancel := context.WithCancel(t.Context())
			defer cancel()
			var calls atomic.Int64
			client := &http.Client{Transport: roundTripFunc(func(*http.Request) (*http.Response, error) {
				if calls.Add(1) == tc.endAt {
					cancel()
				}
				return nil, tc.err
			})}
			dn := &demoNode{id: "node-1"}
			done := make(chan struct{})
			go func() { dn.work(ctx, client, "http://127.0.0.1/"); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				t.Fatal("the worker did not stop")
			}
			require.Equal(t, tc.calls, calls.Load(), "requests tried")
			require.Equal(t, tc.refused, dn.refused.Load(), "refused")
			require.Equal(t, tc.failed, dn.failed.Load(), "failed")
		})
	}
}
