package examples

import (
	"net/http"
	"time"

	"github.com/openai/openai-go/v3"
	"github.com/openai/openai-go/v3/option"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/fleet"
)

// OpenAINodeConfig returns the configuration of a fleet node that shares an
// OpenAI-compatible provider's quota under key (e.g. "openai:gpt-4o").
//
// Its limiter is adaptive.FlatLatency: a provider answers 429 above its
// quota with no rise in latency before it, so the refusals are the only
// signal. AbandonedHold is two seconds because a streaming provider stops
// generating soon after its client closes the connection; a caller that
// stops reading a stream frees its slot that much later. Set MaxQueued so
// that a request waits for a slot instead of failing at once.
func OpenAINodeConfig(key string) fleet.Config {
	lim := adaptive.FlatLatency()
	lim.MaxQueued = 256
	return fleet.Config{
		Key:                key,
		MaxRequestDuration: 10 * time.Minute, // no completion runs longer
		AbandonedHold:      2 * time.Second,
		Limiter:            lim,
	}
}

// NewOpenAIClient returns an OpenAI client for the API at baseURL (e.g.
// "https://api.openai.com/v1/") whose every request — each retry of it
// included — is admitted through node, and holds its slot until the
// response has ended: a streamed completion holds it for the whole stream.
// A 429 makes the node back off and pause for its retry-after-ms, and the
// SDK's own retries then wait for a slot like any request. opts are applied
// after the client's own (option.WithMaxRetries, …).
func NewOpenAIClient(node *fleet.Node, baseURL, apiKey string, opts ...option.RequestOption) openai.Client {
	return openai.NewClient(append([]option.RequestOption{
		option.WithHTTPClient(&http.Client{Transport: node.Transport(http.DefaultTransport)}),
		option.WithBaseURL(baseURL),
		option.WithAPIKey(apiKey),
	}, opts...)...)
}
