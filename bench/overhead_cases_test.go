package bench

import (
	"testing"

	"github.com/stretchr/testify/require"
)

// TestOverheadCasesAdmit runs every benchmark's operation a few thousand
// times on one goroutine: none may be refused, so the benchmarks measure
// admission and release, never rejection.
func TestOverheadCasesAdmit(t *testing.T) {
	t.Parallel()
	names := make(map[string]bool)
	for _, c := range OverheadCases() {
		t.Run(c.Name(), func(t *testing.T) {
			t.Parallel()
			op := c.NewOp(t)
			for i := range 5000 {
				require.True(t, op(), "operation %d refused", i)
			}
		})
		require.False(t, names[c.Name()], "duplicate case %s", c.Name())
		names[c.Name()] = true
	}
	require.Len(t, names, 8)
}
