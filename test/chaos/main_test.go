package chaos

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// toxiproxy v2.5.0: a toxic added to a link (the partitions here)
		// sits between the link's noop stub and its output; when the
		// connection closes while the toxic holds data, the noop stub
		// stays blocked sending to the toxic's stub, which has returned.
		// Nothing outside the library can end it; two runs in four left
		// one behind.
		goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe"))
}
