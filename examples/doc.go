// Package examples shows how a service that calls a shared upstream through
// fleetlimit tests itself against a real fleetlimit schema, using only the
// public test helper package fleettest. It is its own module, so it sees
// fleetlimit exactly as a user's module does.
//
// Run its tests with `make test` from the repository root, or
// `cd examples && go test ./...`; the package doc of fleettest says which
// Postgres they use (a testcontainers-go container when a Docker engine is
// reachable).
package examples
