// Package coordtest holds the coordinator's heavy tests against real
// Postgres: migrations, concurrency and the heartbeat benchmark.
package coordtest

import (
	"testing"

	"github.com/fleetlimit/fleetlimit/fleettest"
)

func TestMain(m *testing.M) { fleettest.Main(m) }
