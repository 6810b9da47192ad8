package test

import (
	"os"
	"testing"

	"go.uber.org/goleak"

	"github.com/fleetlimit/fleetlimit/fleettest"
)

func TestMain(m *testing.M) {
	code := fleettest.Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			os.Stderr.WriteString("goleak: " + err.Error() + "\n")
			code = 1
		}
	}
	os.Exit(code)
}
