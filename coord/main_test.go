package coord

import (
	"testing"

	"github.com/fleetlimit/fleetlimit/internal/pgtest"
)

func TestMain(m *testing.M) { pgtest.Main(m) }
