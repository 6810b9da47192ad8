package chaos

import (
	"testing"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m,
		// toxiproxy v2.5.0: when a toxic is added to a link whose
		// connection is closing, the link's noop stub can stay blocked
		// handing a chunk to a stub that has already returned; nothing
		// outside the library can end it (seen in one run of several).
		goleak.IgnoreTopFunction("github.com/Shopify/toxiproxy/v2/toxics.(*NoopToxic).Pipe"))
}
