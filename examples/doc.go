// Package examples shows how a service that calls a shared upstream through
// fleetlimit tests itself against a real fleetlimit schema, using only the
// public test helper package fleettest. It is its own module, so it sees
// fleetlimit exactly as a user's module does.
//
// Run its tests with `make test` from the repository root, or
// `cd examples && go test ./...`; the package doc of fleettest says which
// Postgres they use (a testcontainers-go container when a Docker engine is
// reachable).
//
// Client (client.go) is a hand-written client of a partner API.
// NewOpenAIClient (openai.go) puts a node in front of the official OpenAI Go
// SDK instead, through option.WithHTTPClient and fleet.Node.Transport, with
// the node configured by OpenAINodeConfig around adaptive.FlatLatency: a
// provider refuses with 429 above its quota, without a rise in latency
// first. Its tests (openai_test.go) drive the SDK against an
// OpenAI-compatible fake on 127.0.0.1 — streams read to their end, closed
// early and cancelled mid-body, and a burst of 429s with the SDK's retries
// on — and check that the node's slots come back, that only the 429s count
// as drops, and that the limit recovers after them.
package examples
