package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/url"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	ucli "github.com/urfave/cli/v2"
	"go.uber.org/goleak"

	"github.com/fleetlimit/fleetlimit/adaptive"
	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/fleet"
	"github.com/fleetlimit/fleetlimit/fleettest"
)

func TestMain(m *testing.M) {
	code := fleettest.Run(m)
	if code == 0 {
		if err := goleak.Find(); err != nil {
			fmt.Fprintln(os.Stderr, "goleak:", err)
			code = 1
		}
	}
	os.Exit(code)
}

// runCLI runs fleetctl in process with an empty environment (no database
// configured) plus env.
func runCLI(t *testing.T, env map[string]string, args ...string) (stdout, stderr string, code int) {
	t.Helper()
	var out, errOut bytes.Buffer
	code = Run(t.Context(), append([]string{"fleetctl"}, args...), Env{
		Stdout: &out,
		Stderr: &errOut,
		Getenv: envMap(env),
	})
	return out.String(), errOut.String(), code
}

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"bogus"}, `fleetctl: unknown command "bogus"`},
		{[]string{}, `fleetctl: missing command`},
		{[]string{"migrate"}, `fleetctl: migrate: missing command`},
		{[]string{"help", "nope"}, `fleetctl: unknown command "nope"; did you mean "nodes"?`},
		{[]string{"nodse"}, `fleetctl: unknown command "nodse"; did you mean "nodes"?`},
		{[]string{"--database-url", "nodes", "api"}, `fleetctl: unknown command "api" (--database-url took the command "nodes" as its value: an unset variable after the flag? give the flag a connection string, or leave it out)`},
		{[]string{"--database-url", "keys"}, `fleetctl: missing command (--database-url took the command "keys" as its value: an unset variable after the flag? give the flag a connection string, or leave it out)`},
		{[]string{"--database-url", "keys", "-o", "json"}, `fleetctl: flag provided but not defined: -o (--database-url took the command "keys" as its value: an unset variable after the flag? give the flag a connection string, or leave it out)`},
		{[]string{"migrate", "statsu"}, `fleetctl: migrate: unknown command "statsu"; did you mean "status"?`},
		{[]string{"limits", "set", "k", "--min", "20", "--max", "10"}, `fleetctl: limits set: --max 10 is below --min 20`},
		{[]string{"version", "-o", "xml"}, `fleetctl: version: invalid value "xml" for --output: want table or json`},
		{[]string{"keys", "-o", "yaml"}, `fleetctl: keys: invalid value "yaml" for --output: want table or json`},
		{[]string{"keys", "extra"}, `fleetctl: keys: unexpected argument "extra"`},
		{[]string{"nodes", ""}, `fleetctl: nodes: empty argument KEY`},
		{[]string{"watch", "k", "--interval", "1ms"}, `fleetctl: watch: invalid value 1ms for --interval: want >= 10ms`},
		{[]string{"drain", "k", "n", "--timeout", "0s"}, `fleetctl: drain: invalid value 0s for --timeout: want > 0`},
		{[]string{"drain", "k", "n", "--timeout", "5s"}, `fleetctl: drain: --timeout bounds --wait: give both, or neither`},
		{[]string{"migrate", "down", "--to", "-1"}, `fleetctl: migrate down: invalid value -1 for --to: want >= 1 (use 'fleetctl migrate reset' to remove the whole schema)`},
		{[]string{"demo", "--duration", "1h"}, `fleetctl: demo: invalid value 1h for --duration: want 1s..10m`},
		{[]string{"demo", "--workers", "0"}, `fleetctl: demo: invalid value 0 for --workers: want 1..256`},
		{[]string{"--connect-timeout", "0s", "keys"}, `fleetctl: keys: invalid value 0s for --connect-timeout: want > 0`},
		{[]string{"--statement-timeout", "500us", "keys"}, `fleetctl: keys: invalid value 500µs for --statement-timeout: want 0 (no timeout) or whole milliseconds in [1ms, 596h31m23.647s]`},
		{[]string{"--statement-timeout", "1500us", "keys"}, `fleetctl: keys: invalid value 1.5ms for --statement-timeout: want 0 (no timeout) or whole milliseconds in [1ms, 596h31m23.647s]`},
		{[]string{"--statement-timeout", "1000000h", "keys"}, `fleetctl: keys: invalid value 1000000h for --statement-timeout: want 0 (no timeout) or whole milliseconds in [1ms, 596h31m23.647s]`},
		{[]string{"--statement-timeout", "1000h30s", "keys"}, `fleetctl: keys: invalid value 1000h30s for --statement-timeout: want 0 (no timeout) or whole milliseconds in [1ms, 596h31m23.647s]`},
		{[]string{"--connect-timeout", "-90m", "keys"}, `fleetctl: keys: invalid value -1h30m for --connect-timeout: want > 0`},
		{[]string{"drain", "k", "n", "--timeout", "-2m"}, `fleetctl: drain: invalid value -2m for --timeout: want > 0`},
		{[]string{"--statement-timeout", "-1s", "keys"}, `fleetctl: keys: invalid value -1s for --statement-timeout: want 0 (no timeout) or whole milliseconds in [1ms, 596h31m23.647s]`},
		{[]string{"keys", "create", strings.Repeat("a", 201)}, `fleetctl: keys create: invalid KEY "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"… (201 bytes): want 1..200 bytes of UTF-8 without NUL`},
		{[]string{"nodes", "\xff"}, `fleetctl: nodes: invalid KEY "\xff" (1 byte): want 1..200 bytes of UTF-8 without NUL`},
		{[]string{"evict", "k", "a\x00b"}, `fleetctl: evict: invalid NODE "a\x00b" (3 bytes): want 1..200 bytes of UTF-8 without NUL`},
		{[]string{"keys", "create", " "}, `fleetctl: keys create: invalid KEY " ": it begins or ends with white space or a byte order mark, and nodes configured without it would share another quota (fleet.New refuses such a key)`},
		{[]string{"keys", "create", "openai\n"}, `fleetctl: keys create: invalid KEY "openai\n": it begins or ends with white space or a byte order mark, and nodes configured without it would share another quota (fleet.New refuses such a key)`},
		{[]string{"keys", "create", "x", "--min"}, `fleetctl: keys create: flag needs an argument: --min`},
		{[]string{"drain", "k", "n", "--timeout"}, `fleetctl: drain: flag needs an argument: --timeout`},
		{[]string{"nodes", "k", "--statement-timeout"}, `fleetctl: nodes: flag needs an argument: --statement-timeout`},
		{[]string{"version", "now"}, `fleetctl: version: unexpected argument "now"`},
		{[]string{"limits", "set", "k", "--rpm", "-1"}, `fleetctl: limits set: invalid value -1 for --rpm: want 0..1000000000 (0 removes the rate)`},
		{[]string{"limits", "set", "k", "--tpm", "1000000001"}, `fleetctl: limits set: invalid value 1000000001 for --tpm: want 0..1000000000 (0 removes the rate)`},
		{[]string{"limits", "set", "k", "--rpm", "many"}, `fleetctl: limits set: invalid value "many" for --rpm: want a decimal integer`},
		{[]string{"demo", "--nodes=abc"}, `fleetctl: demo: invalid value "abc" for --nodes: want a decimal integer`},
		{[]string{"demo", "--nodes", "0x21"}, `fleetctl: demo: invalid value "0x21" for --nodes: want a decimal integer`},
		{[]string{"demo", "--nodes", "99999999999999999999"}, `fleetctl: demo: invalid value "99999999999999999999" for --nodes: out of range: want 1..32`},
		{[]string{"limits", "set", "api", "--min", "99999999999999999999"}, `fleetctl: limits set: invalid value "99999999999999999999" for --min: out of range: want 1..1000000`},
		{[]string{"watch", "api", "--count", "99999999999999999999"}, `fleetctl: watch: invalid value "99999999999999999999" for --count: out of range: want 0..9223372036854775807`},
		{[]string{"watch", "k", "--interval", "soon"}, `fleetctl: watch: invalid value "soon" for --interval: want a duration such as 500ms, 30s or 1m30s`},
		{[]string{"watch", "k", "--interval", "99999999h"}, `fleetctl: watch: invalid value "99999999h" for --interval: out of range: want at most 2562047h47m16.854775807s`},
		{[]string{"watch", "k", "--interval", "-99999999h"}, `fleetctl: watch: invalid value "-99999999h" for --interval: out of range: want at least -2562047h47m16.854775808s`},
		{[]string{"demo", "--duration", "1h99999999999999999999ns"}, `fleetctl: demo: invalid value "1h99999999999999999999ns" for --duration: out of range: want at most 2562047h47m16.854775807s`},
		{[]string{"migrate", "down", "--to", "99"}, fmt.Sprintf(`fleetctl: migrate down: invalid value 99 for --to: no such migration (the newest is %d)`, coord.SchemaVersion)},
		{[]string{"keys", "--database-url"}, `fleetctl: keys: flag needs an argument: --database-url`},
		{[]string{"migrate", "status", "--statement-timeout"}, `fleetctl: migrate status: flag needs an argument: --statement-timeout`},
		{[]string{"keys", "--database-url="}, `fleetctl: keys: empty value for --database-url: give a connection string, or leave the flag out`},
		{[]string{"demo", "--database-url", " "}, `fleetctl: demo: blank value " " for --database-url: give a connection string, or leave the flag out`},
		{[]string{"demo", "--bogus"}, `fleetctl: demo: flag provided but not defined: --bogus`},
		{[]string{"migrate", "reset", "--yes=maybe"}, `fleetctl: migrate reset: invalid boolean value "maybe" for --yes: want true or false`},
		{[]string{"keys", "create", "k", "--rpm", "99999999999"}, `fleetctl: keys create: invalid value 99999999999 for --rpm: want 0..1000000000 (0 removes the rate)`},
		// An unknown flag is named as it was typed; a defined one by its
		// name with two dashes.
		{[]string{"keys", "-x"}, `fleetctl: keys: flag provided but not defined: -x`},
		{[]string{"keys", "--x"}, `fleetctl: keys: flag provided but not defined: --x`},
		{[]string{"keys", "-ojson"}, `fleetctl: keys: flag provided but not defined: -ojson`},
		{[]string{"nodes", "k", "-x=1", "--x"}, `fleetctl: nodes: flag provided but not defined: -x`},
		{[]string{"keys", "-h=maybe"}, `fleetctl: keys: invalid boolean value "maybe" for --help: want true or false`},
		{[]string{"drain", "k", "n", "-timeout=soon"}, `fleetctl: drain: invalid value "soon" for --timeout: want a duration such as 500ms, 30s or 1m30s`},
		{[]string{"keys", "-o"}, `fleetctl: keys: flag needs an argument: --output`},
		// A global flag's error names the command, as its checks do.
		{[]string{"keys", "--statement-timeout="}, `fleetctl: keys: invalid value "" for --statement-timeout: want a duration such as 500ms, 30s or 1m30s`},
		{[]string{"--connect-timeout=soon", "limits", "get", "k"}, `fleetctl: limits get: invalid value "soon" for --connect-timeout: want a duration such as 500ms, 30s or 1m30s`},
		{[]string{"--statement-timeout="}, `fleetctl: invalid value "" for --statement-timeout: want a duration such as 500ms, 30s or 1m30s`},
		{[]string{"--wait", "drain", "k", "n"}, `fleetctl: drain: flag --wait must come after "drain", the command it belongs to`},
		{[]string{"keys", "-force", "delete", "k"}, `fleetctl: keys delete: flag -force must come after "keys delete", the command it belongs to`},
		{[]string{"keys", "--bogus", "create", "k"}, `fleetctl: keys create: flag provided but not defined: --bogus`},
		{[]string{"--bogus", "keys"}, `fleetctl: keys: flag provided but not defined: --bogus`},
		// A value flag written with its value before its command.
		{[]string{"-o", "json", "keys"}, `fleetctl: keys: flag -o must come after "keys", the command it belongs to`},
		{[]string{"limits", "--min", "3", "set", "k"}, `fleetctl: limits set: flag --min must come after "limits set", the command it belongs to`},
		{[]string{"--min", "3", "limits", "set", "k"}, `fleetctl: limits set: flag --min must come after "limits set", the command it belongs to`},
		// A command group's own flag given before a subcommand, which
		// would ignore it.
		{[]string{"keys", "-o", "json", "create", "k"}, `fleetctl: keys create: flag -o belongs to "keys", not to "keys create"`},
		{[]string{"keys", "--output=json", "delete", "k"}, `fleetctl: keys delete: flag --output belongs to "keys", not to "keys delete"`},
		{[]string{"-o", "json", "keys", "create", "k"}, `fleetctl: keys create: flag -o belongs to "keys", not to "keys create"`},
		{[]string{"keys", "-o", "json", "--", "create", "k"}, `fleetctl: keys create: flag -o belongs to "keys", not to "keys create"`},
		// After "--", a flag's name is an argument.
		{[]string{"limits", "--", "get", "-k", "-o", "json"}, `fleetctl: limits get: unexpected argument "-o"`},
		// An unset variable before another flag: no fallback to another
		// database.
		{[]string{"keys", "--database-url", "--output=json"}, `fleetctl: keys: flag needs an argument: --database-url`},
		{[]string{"demo", "--interval", "0s", "--database-url", "postgres://127.0.0.1:1/x"}, `fleetctl: demo: invalid value 0s for --interval: want >= 10ms`},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			_, stderr, code := runCLI(t, nil, tt.args...)
			require.Equal(t, ExitUsage, code, stderr)
			first, rest, _ := strings.Cut(stderr, "\n")
			require.Equal(t, tt.want, first)
			require.Contains(t, rest, "--help' for usage.")
		})
	}
}

// TestUsageHintOfGlobalFlags: a usage error about a global flag, or the
// variable that stands in for --database-url, points to the app's help,
// which lists the global flags, while one about a command's own flag
// points to the command's; and a blank variable is refused, not taken as
// unset (the next source would name another database).
func TestUsageHintOfGlobalFlags(t *testing.T) {
	t.Parallel()
	tests := []struct {
		env        map[string]string
		args       []string
		want, hint string
	}{
		{nil, []string{"--statement-timeout", "abc", "keys"}, `fleetctl: keys: invalid value "abc" for --statement-timeout: want a duration such as 500ms, 30s or 1m30s`, "Run 'fleetctl --help' for usage."},
		{nil, []string{"nodes", "k", "--statement-timeout", "9999999h"}, `fleetctl: nodes: invalid value "9999999h" for --statement-timeout: out of range: want 0 (no timeout) or whole milliseconds in [1ms, 596h31m23.647s]`, "Run 'fleetctl --help' for usage."},
		{nil, []string{"--statement-timeout", "1000h", "keys"}, `fleetctl: keys: invalid value 1000h for --statement-timeout: want 0 (no timeout) or whole milliseconds in [1ms, 596h31m23.647s]`, "Run 'fleetctl --help' for usage."},
		{nil, []string{"keys", "--connect-timeout", "0s"}, `fleetctl: keys: invalid value 0s for --connect-timeout: want > 0`, "Run 'fleetctl --help' for usage."},
		{nil, []string{"keys", "--database-url", " "}, `fleetctl: keys: blank value " " for --database-url: give a connection string, or leave the flag out`, "Run 'fleetctl --help' for usage."},
		{map[string]string{EnvFleetDatabaseURL: " ", EnvDatabaseURL: "postgres://127.0.0.1:1/x"}, []string{"keys"}, `fleetctl: keys: blank value " " for $FLEET_DATABASE_URL: give a connection string, or unset it`, "Run 'fleetctl --help' for usage."},
		{map[string]string{EnvDatabaseURL: "\t"}, []string{"nodes", "k"}, `fleetctl: nodes: blank value "\t" for $DATABASE_URL: give a connection string, or unset it`, "Run 'fleetctl --help' for usage."},
		{nil, []string{"keys", "--connect-timeout", "-9999999h"}, `fleetctl: keys: invalid value "-9999999h" for --connect-timeout: out of range: want > 0`, "Run 'fleetctl --help' for usage."},
		{nil, []string{"--connect-timeout", "2562048h", "keys"}, `fleetctl: keys: invalid value "2562048h" for --connect-timeout: out of range: want at most 2562047h47m16.854775807s`, "Run 'fleetctl --help' for usage."},
		{nil, []string{"keys", "--statement-timeout"}, `fleetctl: keys: flag needs an argument: --statement-timeout`, "Run 'fleetctl --help' for usage."},
		{nil, []string{"keys", "--database-url", "--output", "json"}, `fleetctl: keys: flag needs an argument: --database-url`, "Run 'fleetctl --help' for usage."},
		{map[string]string{EnvFleetDatabaseURL: "postgres://%zz"}, []string{"keys"}, "fleetctl: keys: invalid database URL from $FLEET_DATABASE_URL: cannot parse `postgres://%zz`: failed to parse as URL (invalid percent-encoded token: \"%zz\")", "Run 'fleetctl --help' for usage."},
		{nil, []string{"keys", "-o", "yaml"}, `fleetctl: keys: invalid value "yaml" for --output: want table or json`, "Run 'fleetctl keys --help' for usage."},
		{nil, []string{"drain", "k", "n", "--timeout"}, `fleetctl: drain: flag needs an argument: --timeout`, "Run 'fleetctl drain --help' for usage."},
		{nil, []string{"watch", "k", "--interval", "soon"}, `fleetctl: watch: invalid value "soon" for --interval: want a duration such as 500ms, 30s or 1m30s`, "Run 'fleetctl watch --help' for usage."},
	}
	for _, tt := range tests {
		t.Run(strings.Join(tt.args, " "), func(t *testing.T) {
			t.Parallel()
			_, stderr, code := runCLI(t, tt.env, tt.args...)
			require.Equal(t, ExitUsage, code, stderr)
			require.Equal(t, tt.want+"\n"+tt.hint+"\n", stderr)
		})
	}
}

// TestEmptyFlagValues gives every flag of every command an empty value
// ("--flag="): each is a usage error that names the command and the flag,
// global flags included.
func TestEmptyFlagValues(t *testing.T) {
	t.Parallel()
	r := &runner{env: Env{}.withDefaults(), parsed: func() {}}
	app := r.app()
	// Arguments that pass the commands' checks, so that the flag's is the
	// one that fails.
	argsFor := map[string][]string{"KEY": {"k"}, "KEY NODE": {"k", "n"}, "KIND ROLE": {"node", "r"}, "ROLE": {"r"}}
	extra := map[string][]string{"set": {"--rpm", "1"}}
	var walk func(path []string, cmds []*ucli.Command)
	n := 0
	walk = func(path []string, cmds []*ucli.Command) {
		for _, cmd := range cmds {
			p := append(slices.Clone(path), cmd.Name)
			if len(cmd.Subcommands) > 0 {
				walk(p, cmd.Subcommands)
				if len(cmd.Flags) == 0 {
					continue // a group that only names its subcommands
				}
			}
			flags := cmd.Flags
			if cmd.Name != "version" { // uses no database
				flags = append(slices.Clone(flags), app.Flags...)
			}
			for _, f := range flags {
				name := f.Names()[0]
				args := slices.Concat(p, argsFor[cmd.ArgsUsage], extra[cmd.Name], []string{"--" + name + "="})
				n++
				t.Run(strings.Join(args, " "), func(t *testing.T) {
					t.Parallel()
					_, stderr, code := runCLI(t, nil, args...)
					require.Equal(t, ExitUsage, code, stderr)
					first, _, _ := strings.Cut(stderr, "\n")
					require.True(t, strings.HasPrefix(first, "fleetctl: "+strings.Join(p, " ")+": "), first)
					require.Contains(t, first, "--"+name+": ")
				})
			}
		}
	}
	walk(nil, app.Commands)
	require.Greater(t, n, 40)
}

// TestHelpFalse: --help=false is no request for help; the command runs
// with its arguments.
func TestHelpFalse(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"nodes", "k", "--help=false"},
		{"keys", "create", "-h=false", "k"},
		{"drain", "k", "--help", "n", "--help=false"},
	} {
		stdout, stderr, code := runCLI(t, nil, append(args, "--database-url", "postgres://127.0.0.1:1/x")...)
		require.Equal(t, ExitFailure, code, "%v: %s", args, stderr)
		require.Empty(t, stdout, args)
		require.Equal(t, "fleetctl: cannot connect to 127.0.0.1:1: connection refused\n", stderr, args)
	}
}

// TestArgumentsLikeHelp: a key, node or role called help or h is an
// argument, not urfave/cli's help command.
func TestArgumentsLikeHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"nodes", "help"},
		{"nodes", "h"},
		{"keys", "create", "help"},
		{"drain", "h", "n"},
		{"drain", "help", "help"},
		{"grant", "node", "help"},
		{"revoke", "help"},
		{"nodes", "--", "help"},
	} {
		stdout, stderr, code := runCLI(t, nil, append([]string{"--database-url", "postgres://127.0.0.1:1/x"}, args...)...)
		require.Equal(t, ExitFailure, code, "%v: %s", args, stderr)
		require.Empty(t, stdout, args)
		require.Equal(t, "fleetctl: cannot connect to 127.0.0.1:1: connection refused\n", stderr, args)
	}
	// A command group keeps its help command.
	stdout, stderr, code := runCLI(t, nil, "keys", "help", "create")
	require.Equal(t, ExitOK, code, stderr)
	require.Contains(t, stdout, "fleetctl keys create - create KEY")
	// A request for help wins over a group's flag before the subcommand.
	for _, args := range [][]string{
		{"keys", "-o", "json", "--help", "create"},
		{"keys", "-o", "json", "create", "--help"},
		{"keys", "-o", "json", "create", "k", "-h"},
	} {
		stdout, stderr, code = runCLI(t, nil, args...)
		require.Equal(t, ExitOK, code, "%v: %s", args, stderr)
		require.Contains(t, stdout, "fleetctl keys create - create KEY", args)
	}
	// "help help" is fleetctl's help.
	stdout, stderr, code = runCLI(t, nil, "help", "help")
	require.Equal(t, ExitOK, code, stderr)
	require.True(t, strings.HasPrefix(stdout, "NAME:\n   fleetctl - operate a fleetlimit fleet\n"), stdout)
}

// TestFlagTwoSpellings: a flag written both ways takes its last value, as
// a flag written twice the same way does.
func TestFlagTwoSpellings(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runCLI(t, nil, "version", "-o", "json", "--output", "table")
	require.Equal(t, ExitOK, code, stderr)
	require.True(t, strings.HasPrefix(stdout, "fleetctl "), stdout)
	stdout, stderr, code = runCLI(t, nil, "version", "--output=table", "-o=json")
	require.Equal(t, ExitOK, code, stderr)
	require.True(t, strings.HasPrefix(stdout, "{"), stdout)
}

// TestDashDashAfterArguments: "--" may come after the first argument, or
// between a command group and its subcommand's name; what follows it is
// never a flag.
func TestDashDashAfterArguments(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{
		{"drain", "k", "--", "-n"},
		{"nodes", "k", "--"},
		{"limits", "--", "get", "-k"},
		{"keys", "--", "delete", "-k"},
		{"keys", "--", "delete", "--force"},
		{"--", "drain", "-k", "n"},
		{"--", "limits", "get", "-k"},
	} {
		stdout, stderr, code := runCLI(t, nil, append([]string{"--database-url", "postgres://127.0.0.1:1/x"}, args...)...)
		require.Equal(t, ExitFailure, code, "%v: %s", args, stderr)
		require.Empty(t, stdout, args)
		require.Equal(t, "fleetctl: cannot connect to 127.0.0.1:1: connection refused\n", stderr, args)
	}
}

func TestHelpDocumentsPrecedence(t *testing.T) {
	t.Parallel()
	stdout, stderr, code := runCLI(t, nil, "--help")
	require.Equal(t, ExitOK, code, stderr)
	require.Contains(t, stdout, "--database-url, $FLEET_DATABASE_URL,\n   $DATABASE_URL, then libpq's PG* variables")
	require.Contains(t, stdout, "Exit status: 0 ok, 1 failure, 2 usage error, 3 check failed")
	for _, cmd := range []string{"migrate", "keys", "nodes", "drain", "undrain", "evict", "limits", "watch", "demo", "version"} {
		require.Contains(t, stdout, "\n   "+cmd+" ")
	}
}

func TestConnectRefusedIsOneLine(t *testing.T) {
	t.Parallel()
	begin := time.Now()
	stdout, stderr, code := runCLI(t, nil, "keys", "--database-url", "postgres://127.0.0.1:1/x")
	require.Equal(t, ExitFailure, code)
	require.Empty(t, stdout)
	require.Equal(t, "fleetctl: cannot connect to 127.0.0.1:1: connection refused\n", stderr)
	require.Less(t, time.Since(begin), DefaultConnectTimeout)

	// Every host of a multi-host string is named, each once (sslmode
	// prefer tries each twice).
	_, stderr, code = runCLI(t, nil, "keys", "--database-url", "postgres://127.0.0.1:1,127.0.0.1:2/x")
	require.Equal(t, ExitFailure, code)
	require.Equal(t, "fleetctl: cannot connect to 127.0.0.1:1 or 127.0.0.1:2: connection refused\n", stderr)
}

func TestConnectTimeout(t *testing.T) {
	t.Parallel()
	addr := silentServer(t)
	begin := time.Now()
	_, stderr, code := runCLI(t, map[string]string{EnvFleetDatabaseURL: "postgres://u@" + addr + "/x"}, "--connect-timeout", "300ms", "nodes", "k")
	elapsed := time.Since(begin)
	require.Equal(t, ExitFailure, code)
	require.Equal(t, "fleetctl: cannot connect to "+addr+": timed out after 300ms\n", stderr)
	require.GreaterOrEqual(t, elapsed, 250*time.Millisecond)
	require.Less(t, elapsed, 3*time.Second, "bounded by the connect timeout")
}

// TestWatchLiveView runs watch with a terminal: every refresh clears the
// screen and redraws the table and the chart.
func TestWatchLiveView(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	seedKey(t, dsn)
	var out, errOut bytes.Buffer
	code := Run(t.Context(), []string{"fleetctl", "watch", "k", "--count", "3", "--interval", "20ms"}, Env{
		Stdout:     &out,
		Stderr:     &errOut,
		Getenv:     envMap(map[string]string{EnvFleetDatabaseURL: dsn, "COLUMNS": "40"}),
		IsTerminal: func(io.Writer) bool { return true },
	})
	require.Equal(t, ExitOK, code, errOut.String())
	s := out.String()
	require.Equal(t, 3, strings.Count(s, ansiClear), "one redraw per refresh")
	require.True(t, strings.HasPrefix(s, ansiHideCursor))
	require.True(t, strings.HasSuffix(s, ansiShowCursor), "the cursor is restored")
	last := s[strings.LastIndex(s, ansiClear):]
	require.Contains(t, last, `key "k"  L_global 12`)
	require.Contains(t, last, "NODE")
	require.Contains(t, last, "node-1")
	require.Regexp(t, `L_global +█{3} 12\n`, last, "three samples at the top of the scale")
	require.Regexp(t, `in-flight +▄{3} 5\n`, last)
	require.Contains(t, last, "scale 0..12 over the last 3 refreshes", "the refreshes charted so far")
}

// TestWatchContextCancel stops an endless watch by cancelling its context,
// as SIGINT does: exit status 0. The context is cancelled once two
// refreshes were printed, not after a fixed time, which a loaded machine
// can spend connecting.
func TestWatchContextCancel(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	seedKey(t, dsn)
	ctx, cancel := context.WithTimeout(t.Context(), time.Minute)
	defer cancel()
	out := &cancelAfterLines{lines: 2, cancel: cancel}
	var errOut bytes.Buffer
	code := Run(ctx, []string{"fleetctl", "watch", "k", "--interval", "50ms"}, Env{
		Stdout: out, Stderr: &errOut, Getenv: envMap(map[string]string{EnvFleetDatabaseURL: dsn}),
	})
	require.Equal(t, ExitOK, code, errOut.String())
	require.ErrorIs(t, ctx.Err(), context.Canceled, "cancelled after two refreshes, not by the minute's timeout")
	require.GreaterOrEqual(t, strings.Count(out.String(), "\n"), 2)
}

// cancelAfterLines is a writer that calls cancel once lines newlines have
// been written to it.
type cancelAfterLines struct {
	bytes.Buffer
	lines  int
	cancel context.CancelFunc
}

func (w *cancelAfterLines) Write(p []byte) (int, error) {
	n, err := w.Buffer.Write(p)
	if strings.Count(w.String(), "\n") >= w.lines {
		w.cancel()
	}
	return n, err
}

func TestVersionJSONAnyCase(t *testing.T) {
	t.Parallel()
	for _, format := range []string{"json", "JSON", "Json"} {
		out, errOut, code := runCLI(t, nil, "version", "-o", format)
		require.Equal(t, 0, code, errOut)
		var v versionView
		require.NoError(t, json.Unmarshal([]byte(out), &v), out)
		require.Equal(t, "fleetctl", v.Name)
		require.NotEmpty(t, v.Version)
		require.True(t, strings.HasPrefix(v.Go, "go"))
	}
}

// TestBadRatesWriteNothing: a bad value in any flag of limits set or keys
// create is refused before anything is written, whichever flag comes
// first, and a bound the coordinator refuses leaves the rates alone too.
func TestBadRatesWriteNothing(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	seedKey(t, dsn)
	env := map[string]string{EnvFleetDatabaseURL: dsn}
	_, stderr, code := runCLI(t, env, "limits", "set", "k", "--min", "2", "--max", "50", "--rpm", "100", "--tpm", "5000")
	require.Equal(t, ExitOK, code, stderr)

	pool, err := pgxpool.New(t.Context(), dsn)
	require.NoError(t, err)
	defer pool.Close()
	admin, err := coord.NewPostgres(pool)
	require.NoError(t, err)
	unchanged := func(msg string) {
		t.Helper()
		k, err := findKey(t.Context(), admin, "k")
		require.NoError(t, err, msg)
		require.Equal(t, 2, *k.MinLimit, msg)
		require.Equal(t, 50, *k.MaxLimit, msg)
		require.Equal(t, coord.Rates{Requests: 100, Tokens: 5000}, k.RateLimit, msg)
	}
	unchanged("the first change")

	for _, tt := range []struct {
		args []string
		code int
		want string // in the first line of stderr
	}{
		{[]string{"--min", "3", "--rpm", "-1"}, ExitUsage, "invalid value -1 for --rpm"},
		{[]string{"--rpm", "200", "--max", "0"}, ExitUsage, "invalid value 0 for --max"},
		{[]string{"--rpm", "200", "--tpm", "2000000000"}, ExitUsage, "invalid value 2000000000 for --tpm"},
		{[]string{"--tpm", "7", "--rpm", "x"}, ExitUsage, `invalid value "x" for --rpm`},
		{[]string{"--max", "10", "--min", "20", "--rpm", "200"}, ExitUsage, "--max 10 is below --min 20"},
		// The coordinator refuses a min above the unchanged max: the
		// rates, given with it, are not written either.
		{[]string{"--min", "60", "--rpm", "200", "--tpm", "0"}, ExitFailure, "60"},
	} {
		_, stderr, code := runCLI(t, env, append([]string{"limits", "set", "k"}, tt.args...)...)
		require.Equal(t, tt.code, code, "%v: %s", tt.args, stderr)
		first, _, _ := strings.Cut(stderr, "\n")
		require.Contains(t, first, tt.want, tt.args)
		unchanged(strings.Join(tt.args, " "))
	}

	// keys create refuses a bad rate before creating the key.
	for _, args := range [][]string{
		{"--rpm", "-5"},
		{"--max", "5", "--tpm", "1000000001"},
		{"--tpm", "lots"},
	} {
		_, stderr, code := runCLI(t, env, append([]string{"keys", "create", "fresh"}, args...)...)
		require.Equal(t, ExitUsage, code, "%v: %s", args, stderr)
		_, err := findKey(t.Context(), admin, "fresh")
		require.ErrorContains(t, err, `unknown key "fresh"`, "%v created the key", args)
	}

	// A good one creates it with its rates.
	stdout, stderr, code := runCLI(t, env, "keys", "create", "fresh", "--tpm", "9000", "--rpm", "0")
	require.Equal(t, ExitOK, code, stderr)
	require.Equal(t, "key \"fresh\" created (min -, max -, rpm -, tpm 9000)\n", stdout)
	k, err := findKey(t.Context(), admin, "fresh")
	require.NoError(t, err)
	require.Equal(t, coord.Rates{Tokens: 9000}, k.RateLimit)

	// --rpm 0 removes the request rate and keeps the token rate.
	stdout, stderr, code = runCLI(t, env, "limits", "set", "k", "--rpm", "0")
	require.Equal(t, ExitOK, code, stderr)
	require.Contains(t, stdout, "RPM")
	k, err = findKey(t.Context(), admin, "k")
	require.NoError(t, err)
	require.Equal(t, coord.Rates{Tokens: 5000}, k.RateLimit)
}

// TestIsAdmissionError: the demo counts a node's refusals, an eviction's
// included, as refused, not failed, through the client's wrapping.
func TestIsAdmissionError(t *testing.T) {
	t.Parallel()
	for _, err := range []error{adaptive.ErrQueueFull, adaptive.ErrPaused, fleet.ErrFenced, fleet.ErrEvicted,
		fleet.ErrNotStarted, fleet.ErrStopped} {
		wrapped := &url.Error{Op: "Get", URL: "http://127.0.0.1:1", Err: err}
		require.True(t, isAdmissionError(wrapped), "%v", err)
	}
	require.False(t, isAdmissionError(&url.Error{Op: "Get", URL: "http://127.0.0.1:1", Err: io.ErrUnexpectedEOF}))
}

// fullWriter fails every write, as /dev/full does.
type fullWriter struct{}

func (fullWriter) Write([]byte) (int, error) { return 0, errors.New("no space left on device") }

// TestLostOutputFails: a run whose output could not be written does not
// exit 0, and says that what it changed is changed.
func TestLostOutputFails(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	for _, args := range [][]string{{"version"}, {"--help"}, {"keys", "create", "lost-output"}, {"limits", "set", "lost-output", "--max", "9"}} {
		var errOut bytes.Buffer
		code := Run(t.Context(), append([]string{"fleetctl"}, args...), Env{Stdout: fullWriter{}, Stderr: &errOut, Getenv: envMap(map[string]string{EnvFleetDatabaseURL: dsn})})
		require.Equal(t, ExitFailure, code, "%v: %s", args, errOut.String())
		require.Contains(t, errOut.String(), "writing the output failed: no space left on device (what the command changed before that stays changed)\n", args)
	}
	require.Contains(t, fleetctlOK(t, dsn, "limits", "get", "lost-output"), "lost-output  -    9 ")
}
