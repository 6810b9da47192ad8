package coord_test

import (
	"testing"

	"github.com/fleetlimit/fleetlimit/fleettest"
)

func TestMain(m *testing.M) { fleettest.Main(m) }
