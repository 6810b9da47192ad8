package coord_test

import "github.com/fleetlimit/fleetlimit/coord"

// The fixtures of core_test.go, under the names the tests use.
var (
	t0      = coord.T0
	rep     = coord.Rep
	applied = coord.Applied
)

const ttl = coord.TTL
