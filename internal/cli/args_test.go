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
		{"fleetctl keys --database-url U -o json", "fleetctl --database-url U keys --output json"},
		{"fleetctl --database-url=U nodes k --statement-timeout 1s", "fleetctl --database-url=U --statement-timeout 1s nodes k"},
		{"fleetctl limits set k --max 5 --clear-min", "fleetctl limits set --max 5 --clear-min k"},
		{"fleetctl limits --help", "fleetctl limits --help"},
		{"fleetctl limits get k -h", "fleetctl limits get --help"},
		{"fleetctl nodes k --help", "fleetctl nodes --help"},
		{"fleetctl drain k n -h --wait", "fleetctl drain --help --wait"},
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
		{"fleetctl keys create -h=0 k", "fleetctl keys create --help=0 k"},
		{"fleetctl nodes k -h --help=false", "fleetctl nodes --help --help=false k"},
		{"fleetctl nodes k --help=false -h", "fleetctl nodes --help=false --help"},
		{"fleetctl nodes k -o h", "fleetctl nodes --output h k"},
		// One spelling per flag, the last value wins.
		{"fleetctl keys -o json --output table", "fleetctl keys --output json --output table"},
		{"fleetctl -database-url=U keys -wait", "fleetctl --database-url=U keys -wait"},
		// "--" before the positional arguments, wherever it was.
		{"fleetctl drain k -- -n", "fleetctl drain -- k -n"},
		{"fleetctl nodes k --", "fleetctl nodes -- k"},
		{"fleetctl drain k --wait -- -n --wait", "fleetctl drain --wait -- k -n --wait"},
		// Command names right after "--" still name the command.
		{"fleetctl limits -- get -k", "fleetctl limits get -- -k"},
		{"fleetctl keys -- delete -k --force", "fleetctl keys delete -- -k --force"},
		{"fleetctl -- drain -n k", "fleetctl drain -- -n k"},
		{"fleetctl keys --database-url U -- create -k", "fleetctl --database-url U keys create -- -k"},
		{"fleetctl -- -- keys", "fleetctl -- -- keys"},
		{"fleetctl drain -- k delete", "fleetctl drain -- k delete"},
		// A value that is a flag of the command's is no value; one that
		// only looks like a flag is.
		{"fleetctl migrate down --to -1", "fleetctl migrate down --to -1"},
		{"fleetctl help help", "fleetctl --help"},
		{"fleetctl h h", "fleetctl --help"},
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

// TestNormalizeArgsValueless: a value flag followed by another flag of the
// command's, or by a global flag, has no value.
func TestNormalizeArgsValueless(t *testing.T) {
	t.Parallel()
	tests := []struct{ in, want string }{
		{"fleetctl keys --database-url --output=json", "keys: flag needs an argument: --database-url"},
		{"fleetctl --database-url --statement-timeout=1s nodes k", "nodes: flag needs an argument: --database-url"},
		{"fleetctl drain k n --timeout --wait", "drain: flag needs an argument: --timeout"},
		{"fleetctl keys -o -h", "keys: flag needs an argument: --output"},
	}
	for _, tt := range tests {
		t.Run(tt.in, func(t *testing.T) {
			t.Parallel()
			r := &runner{env: Env{}.withDefaults(), parsed: func() {}}
			_, err := normalizeArgs(r.app(), strings.Fields(tt.in))
			var ee *exitError
			require.ErrorAs(t, err, &ee)
			require.Equal(t, ExitUsage, ee.code)
			require.Equal(t, tt.want, ee.command+": "+ee.Error())
		})
	}
}

// TestNormalizedTyped: an unknown flag is named as it was written, also
// one normalizeArgs did not record.
func TestNormalizedTyped(t *testing.T) {
	t.Parallel()
	n := normalized{
		args:    strings.Fields("fleetctl limits get --x=1 -- -k --y"),
		unknown: map[string]string{"x": "-x"},
	}
	require.Equal(t, "-x", n.typed("x"), "as recorded")
	require.Equal(t, "-k", n.typed("k"))
	require.Equal(t, "--y", n.typed("y"))
	require.Equal(t, "-z", n.typed("z"), "as Go's flag package names it")
}
