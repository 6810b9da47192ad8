package cli

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestNormalizeArgs(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"fleetctl keys", "fleetctl keys"},
		{"fleetctl drain k n --wait --timeout 5s", "fleetctl drain --wait --timeout 5s k n"},
		{"fleetctl drain k --wait n", "fleetctl drain --wait k n"},
		{"fleetctl keys --database-url U -o json", "fleetctl --database-url U keys -o json"},
		{"fleetctl --database-url=U nodes k --statement-timeout 1s", "fleetctl --database-url=U --statement-timeout 1s nodes k"},
		{"fleetctl limits set k --max 5 --clear-min", "fleetctl limits set --max 5 --clear-min k"},
		{"fleetctl limits --help", "fleetctl limits --help"},
		{"fleetctl limits get k -h", "fleetctl limits get -h"},
		{"fleetctl nodes k --help", "fleetctl nodes --help"},
		{"fleetctl drain k n -h --wait", "fleetctl drain -h --wait"},
		{"fleetctl watch k --count=3", "fleetctl watch --count=3 k"},
		{"fleetctl keys --bogus x", "fleetctl keys --bogus x"},
		{"fleetctl nodes -- -weird-key", "fleetctl nodes -- -weird-key"},
		{"fleetctl migrate down --to 1", "fleetctl migrate down --to 1"},
		{"fleetctl help keys", "fleetctl keys --help"},
		{"fleetctl help", "fleetctl help"},
		{"fleetctl help keys --database-url U", "fleetctl keys --help"},
		{"fleetctl help keys -o", "fleetctl keys --help"},
		{"fleetctl help migrate reset", "fleetctl migrate reset --help"},
		{"fleetctl migrate bogus --help", "fleetctl migrate --help bogus"},
		{"fleetctl bogus --wait", "fleetctl --wait bogus"},
		{"fleetctl", "fleetctl"},
		// --help=false is no request for help: the arguments stay.
		{"fleetctl nodes k --help=false", "fleetctl nodes --help=false k"},
		{"fleetctl keys create -h=0 k", "fleetctl keys create -h=0 k"},
		{"fleetctl nodes k -h --help=false", "fleetctl nodes -h --help=false k"},
		{"fleetctl nodes k --help=false -h", "fleetctl nodes --help=false -h"},
		{"fleetctl nodes k -o h", "fleetctl nodes -o h k"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			r := &runner{env: Env{}.withDefaults(), parsed: func() {}}
			got, err := normalizeArgs(r.app(), strings.Fields(tt.in))
			require.NoError(t, err)
			require.Equal(t, tt.want, strings.Join(got.args, " "))
		})
	}
}
