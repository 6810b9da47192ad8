package examples_test

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/fleetlimit/fleetlimit/examples"
	"github.com/fleetlimit/fleetlimit/fleet"
	"github.com/fleetlimit/fleetlimit/fleettest"
)

// fakeOpenAI is an OpenAI-compatible provider serving POST
// /v1/chat/completions. A streamed completion sends one chunk per token,
// max_completion_tokens of them (5 by default), chunkGap apart, then
// "data: [DONE]". While refuse is positive, each request takes one from it
// and is answered 429 with retry-after-ms: 20, as OpenAI answers above a
// quota.
type fakeOpenAI struct {
	chunkGap time.Duration
	latency  time.Duration // before a non-streamed answer
	refuse   atomic.Int64

	active    atomic.Int64 // requests being served now
	completed atomic.Int64 // completions sent to their end ([DONE] for a stream)
	cut       atomic.Int64 // streams whose client left before their end
	refused   atomic.Int64 // 429s sent
}

// token is the content of the i-th chunk of a streamed completion.
func token(i int) string { return fmt.Sprintf("t%d ", i) }

// streamText is the content of a whole streamed completion of n tokens.
func streamText(n int) string {
	var b strings.Builder
	for i := range n {
		b.WriteString(token(i))
	}
	return b.String()
}

func (f *fakeOpenAI) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.Method != http.MethodPost || r.URL.Path != "/v1/chat/completions" {
		http.Error(w, `{"error":{"message":"not found","type":"invalid_request_error"}}`, http.StatusNotFound)
		return
	}
	f.active.Add(1)
	defer f.active.Add(-1)
	var req struct {
		Model     string `json:"model"`
		Stream    bool   `json:"stream"`
		MaxTokens int    `json:"max_completion_tokens"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil {
		http.Error(w, `{"error":{"message":"bad json","type":"invalid_request_error"}}`, http.StatusBadRequest)
		return
	}
	for n := f.refuse.Load(); n > 0; n = f.refuse.Load() {
		if f.refuse.CompareAndSwap(n, n-1) {
			f.refused.Add(1)
			w.Header().Set("Content-Type", "application/json")
			w.Header().Set("retry-after-ms", "20")
			w.WriteHeader(http.StatusTooManyRequests)
			_, _ = w.Write([]byte(`{"error":{"message":"Rate limit reached","type":"requests","code":"rate_limit_exceeded"}}`))
			return
		}
	}
	tokens := req.MaxTokens
	if tokens <= 0 {
		tokens = 5
	}
	created := time.Now().Unix()
	if !req.Stream {
		time.Sleep(f.latency)
		w.Header().Set("Content-Type", "application/json")
		_ = json.NewEncoder(w).Encode(map[string]any{
			"id": "chatcmpl-fake", "object": "chat.completion", "created": created, "model": req.Model,
			"choices": []any{map[string]any{
				"index": 0, "finish_reason": "stop",
				"message": map[string]any{"role": "assistant", "content": streamText(tokens)},
			}},
		})
		f.completed.Add(1)
		return
	}
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-cache")
	w.WriteHeader(http.StatusOK)
	flusher := w.(http.Flusher)
	flusher.Flush() // the headers go out at once, before the first token
	for i := range tokens {
		select {
		case <-r.Context().Done():
			f.cut.Add(1)
			return
		case <-time.After(f.chunkGap):
		}
		chunk, _ := json.Marshal(map[string]any{
			"id": "chatcmpl-fake", "object": "chat.completion.chunk", "created": created, "model": req.Model,
			"choices": []any{map[string]any{"index": 0, "delta": map[string]any{"content": token(i)}}},
		})
		if _, err := fmt.Fprintf(w, "data: %s\n\n", chunk); err != nil {
			f.cut.Add(1)
			return
		}
		flusher.Flush()
	}
	f.completed.Add(1) // before [DONE]: the client may check as soon as it reads it
	_, _ = fmt.Fprint(w, "data: [DONE]\n\n")
	flusher.Flush()
}

// startFakeOpenAI serves f on a loopback port until the test ends and
// returns its base URL, ending in /v1/.
func startFakeOpenAI(t *testing.T, f *fakeOpenAI) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewUnstartedServer(f)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv.URL + "/v1/"
}

// openAINode starts a node on a coordinator of its own, configured by
// examples.OpenAINodeConfig and then by adjust; Start returns once it has
// joined. Nothing more is waited for: the join's grant gives the node a
// share, but the next heartbeat, with no request yet, takes it back (a node
// without demand holds none), and the first request waits for the share its
// demand brings.
func openAINode(t *testing.T, adjust func(*fleet.Config)) *fleet.Node {
	t.Helper()
	c := fleettest.Coordinator(t)
	cfg := examples.OpenAINodeConfig("openai:fake")
	cfg.NodeID = "node-" + strings.ReplaceAll(t.Name(), "/", "-")
	cfg.HeartbeatInterval = 100 * time.Millisecond
	// Grants come quickly, but a heartbeat delayed on a loaded machine
	// (these tests run in parallel under the race detector) must not fence
	// the node: at the default lease of two intervals it would after 150ms.
	cfg.LeaseTTL = 2 * time.Second
	if adjust != nil {
		adjust(&cfg)
	}
	return fleettest.StartNode(t, c, cfg)
}

func chatParams(tokens int) openai.ChatCompletionNewParams {
	return openai.ChatCompletionNewParams{
		Model:               "fake-model",
		Messages:            []openai.ChatCompletionMessageParamUnion{openai.UserMessage("hi")},
		MaxCompletionTokens: openai.Int(int64(tokens)),
	}
}

// admitted is how many requests the node has handed a slot to, at every
// priority: the requests that went through it.
func admitted(n *fleet.Node) uint64 {
	var sum uint64
	for _, p := range n.PriorityStats() {
		sum += p.Admitted
	}
	return sum
}

// waitIdle waits until the node has no request in flight.
func waitIdle(t *testing.T, n *fleet.Node, timeout time.Duration) fleet.State {
	t.Helper()
	return fleettest.WaitFor(t, n, timeout, func(s fleet.State) bool { return s.Inflight == 0 })
}

// TestOpenAIStreamReadFully reads streamed completions to their end through
// the SDK. Every token arrives, the node counts no drop, and every slot is
// free again at once: the SDK closes the body at "data: [DONE]", before
// its end has been read, and the transport reads on for that end.
func TestOpenAIStreamReadFully(t *testing.T) {
	t.Parallel()
	f := &fakeOpenAI{chunkGap: 2 * time.Millisecond}
	base := startFakeOpenAI(t, f)
	node := openAINode(t, nil)
	client := examples.NewOpenAIClient(node, base, "sk-test", option.WithMaxRetries(0))

	const streams, tokens = 8, 20
	var wg sync.WaitGroup
	texts := make([]string, streams)
	errs := make([]error, streams)
	for i := range streams {
		wg.Go(func() {
			stream := client.Chat.Completions.NewStreaming(t.Context(), chatParams(tokens))
			defer stream.Close()
			var b strings.Builder
			for stream.Next() {
				if ch := stream.Current().Choices; len(ch) > 0 {
					b.WriteString(ch[0].Delta.Content)
				}
			}
			texts[i], errs[i] = b.String(), stream.Err()
		})
	}
	wg.Wait()
	for i := range streams {
		if errs[i] != nil {
			t.Errorf("stream %d: %v", i, errs[i])
		} else if texts[i] != streamText(tokens) {
			t.Errorf("stream %d: content %q, want %q", i, texts[i], streamText(tokens))
		}
	}
	if got := f.completed.Load(); got != streams {
		t.Errorf("provider completed %d streams, want %d", got, streams)
	}
	s := waitIdle(t, node, time.Second) // under the 2s AbandonedHold: no stream was held as abandoned
	if s.Drops != 0 {
		t.Errorf("%d drops for streams served in full", s.Drops)
	}
	if got := admitted(node); got != streams {
		t.Errorf("the node admitted %d requests, want the %d streams", got, streams)
	}
	t.Logf("after %d full streams: %+v", streams, s)
}

// TestOpenAIStreamClosedEarly closes streams after their first two chunks.
// The provider sees its client leave, the node counts no drop, and every
// slot is free again once AbandonedHold has passed.
func TestOpenAIStreamClosedEarly(t *testing.T) {
	t.Parallel()
	f := &fakeOpenAI{chunkGap: 5 * time.Millisecond}
	base := startFakeOpenAI(t, f)
	node := openAINode(t, func(c *fleet.Config) { c.AbandonedHold = 200 * time.Millisecond })
	client := examples.NewOpenAIClient(node, base, "sk-test", option.WithMaxRetries(0))

	const streams = 8
	var wg sync.WaitGroup
	for i := range streams {
		wg.Go(func() {
			stream := client.Chat.Completions.NewStreaming(t.Context(), chatParams(10_000))
			for range 2 {
				if !stream.Next() {
					t.Errorf("stream %d ended before 2 chunks: %v", i, stream.Err())
					break
				}
			}
			if err := stream.Close(); err != nil {
				t.Errorf("stream %d: close: %v", i, err)
			}
		})
	}
	wg.Wait()
	s := waitIdle(t, node, 5*time.Second)
	if s.Drops != 0 {
		t.Errorf("%d drops for streams the caller closed", s.Drops)
	}
	if got := admitted(node); got != streams {
		t.Errorf("the node admitted %d requests, want the %d streams", got, streams)
	}
	deadline := time.Now().Add(5 * time.Second)
	for f.cut.Load() < streams && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if got := f.cut.Load(); got != streams {
		t.Errorf("provider saw %d of %d streams cut short", got, streams)
	}
	t.Logf("after %d streams closed early: %+v", streams, s)
}

// TestOpenAIStreamCancelled ends the caller's context in the middle of
// streams whose headers came back at once: by cancellation, and by a
// deadline. Neither is an overload signal, so the node's drop count stays
// where it was, and every slot is free again once AbandonedHold has passed.
func TestOpenAIStreamCancelled(t *testing.T) {
	t.Parallel()
	f := &fakeOpenAI{chunkGap: 5 * time.Millisecond}
	base := startFakeOpenAI(t, f)
	node := openAINode(t, func(c *fleet.Config) { c.AbandonedHold = 200 * time.Millisecond })
	client := examples.NewOpenAIClient(node, base, "sk-test", option.WithMaxRetries(0))

	for _, tc := range []struct {
		name string
		ctx  func() (context.Context, context.CancelFunc)
		want error
	}{
		{"cancel", func() (context.Context, context.CancelFunc) { return context.WithCancel(t.Context()) }, context.Canceled},
		// The stream lasts 10000 × 5ms; its headers come back long before the deadline.
		{"deadline", func() (context.Context, context.CancelFunc) { return context.WithTimeout(t.Context(), time.Second) }, context.DeadlineExceeded},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before, admittedBefore := node.State().Drops, admitted(node)
			const streams = 8
			var wg sync.WaitGroup
			for i := range streams {
				wg.Go(func() {
					ctx, cancel := tc.ctx()
					defer cancel()
					stream := client.Chat.Completions.NewStreaming(ctx, chatParams(10_000))
					defer stream.Close()
					chunks := 0
					for stream.Next() {
						if chunks++; chunks == 2 && tc.want == context.Canceled {
							cancel()
						}
					}
					if chunks < 2 {
						t.Errorf("stream %d: %d chunks before its end, want the headers and 2 chunks first", i, chunks)
					}
					if err := stream.Err(); !errors.Is(err, tc.want) {
						t.Errorf("stream %d: error %v, want %v", i, err, tc.want)
					}
				})
			}
			wg.Wait()
			s := waitIdle(t, node, 5*time.Second)
			if s.Drops != before {
				t.Errorf("drops went from %d to %d: a caller's own %s after the headers counted as overload", before, s.Drops, tc.name)
			}
			if got := admitted(node) - admittedBefore; got != streams {
				t.Errorf("the node admitted %d requests, want the %d streams", got, streams)
			}
			t.Logf("after %d streams ended by %s: %+v", streams, tc.name, s)
		})
	}
}

// TestOpenAI429Burst sends non-streamed completions from 12 workers
// through a node whose estimate may rise to 8, waits for it to get there,
// then has the provider answer the next 20 requests with 429 and
// retry-after-ms: 20 while the SDK retries them. Every 429 is one drop and
// nothing else is, the estimate falls, every slot comes back, and the
// limit is back at its value before the burst within 10 s of the answers
// resuming.
func TestOpenAI429Burst(t *testing.T) {
	t.Parallel()
	const workers, maxLimit, burst = 12, 8, 20
	f := &fakeOpenAI{latency: 5 * time.Millisecond}
	base := startFakeOpenAI(t, f)
	node := openAINode(t, func(c *fleet.Config) {
		c.Limiter.InitialLimit = 4
		c.Limiter.MaxLimit = maxLimit
	})
	client := examples.NewOpenAIClient(node, base, "sk-test", option.WithMaxRetries(5))

	ctx, stop := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	var ok, failed atomic.Int64
	var lastErr atomic.Value
	for range workers {
		wg.Go(func() {
			for ctx.Err() == nil {
				c, err := client.Chat.Completions.New(ctx, chatParams(3))
				switch {
				case err == nil && len(c.Choices) == 1 && c.Choices[0].Message.Content == streamText(3):
					ok.Add(1)
				case ctx.Err() == nil:
					failed.Add(1)
					lastErr.Store(fmt.Sprint(err))
				}
			}
		})
	}
	defer func() { stop(); wg.Wait() }()

	// The estimate rises to MaxLimit under a load above it, and stays
	// there: the provider refuses nothing.
	pre := fleettest.WaitFor(t, node, 10*time.Second, func(s fleet.State) bool {
		return s.Limit == maxLimit && s.Estimate >= maxLimit
	})
	t.Logf("before the burst: limit %d, estimate %.2f, share %d, drops %d, %d answers", pre.Limit, pre.Estimate, pre.Share, pre.Drops, ok.Load())

	// Watch the node through the burst for the lowest it goes.
	lowest := make(chan fleet.State, 1)
	watching, stopWatching := context.WithCancel(ctx)
	defer stopWatching()
	go func() {
		low := node.State()
		for watching.Err() == nil {
			if s := node.State(); s.Estimate < low.Estimate {
				low = s
			}
			time.Sleep(time.Millisecond)
		}
		lowest <- low
	}()

	f.refuse.Store(burst)
	answered := ok.Load()
	after := fleettest.WaitFor(t, node, 10*time.Second, func(s fleet.State) bool { return s.Drops-pre.Drops >= burst })
	stopWatching()
	low := <-lowest
	t.Logf("lowest during the burst: limit %d, estimate %.2f, share %d; after it: limit %d, estimate %.2f, drops %d",
		low.Limit, low.Estimate, low.Share, after.Limit, after.Estimate, after.Drops-pre.Drops)
	if low.Estimate >= pre.Estimate {
		t.Errorf("the estimate never fell below %.2f during %d 429s", pre.Estimate, burst)
	}

	// Traffic goes on after the burst: the SDK's retries get answers.
	deadline := time.Now().Add(10 * time.Second)
	for ok.Load() < answered+2*workers && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if ok.Load() < answered+2*workers {
		t.Errorf("%d answers in 10s after the burst began; node: %+v", ok.Load()-answered, node.State())
	}
	// And the limit recovers to its value before the burst.
	recovered := time.Now()
	for node.State().Limit < pre.Limit && time.Since(recovered) < 10*time.Second {
		time.Sleep(5 * time.Millisecond)
	}
	if s := node.State(); s.Limit < pre.Limit {
		t.Errorf("the limit did not recover to %d within 10s after the 429s: %+v", pre.Limit, s)
	} else {
		t.Logf("limit back to %d %v after the answers resumed", s.Limit, time.Since(recovered).Round(time.Millisecond))
	}
	stop()
	wg.Wait()
	s := waitIdle(t, node, 5*time.Second)
	if drops := s.Drops - pre.Drops; drops != burst {
		t.Errorf("%d drops for the provider's %d 429s", drops, burst)
	}
	if n := f.refused.Load(); n != burst {
		t.Errorf("the provider sent %d 429s, want %d", n, burst)
	}
	t.Logf("%d answers, %d calls failed after the SDK's retries (last: %v)", ok.Load(), failed.Load(), lastErr.Load())
}
