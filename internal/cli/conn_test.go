package cli

import (
	"context"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/fleetlimit/fleetlimit/fleettest"
)

func envMap(m map[string]string) func(string) string {
	return func(name string) string { return m[name] }
}

func TestResolveDatabaseURLPrecedence(t *testing.T) {
	t.Parallel()
	all := map[string]string{
		EnvFleetDatabaseURL: "postgres://fleet/db",
		EnvDatabaseURL:      "postgres://generic/db",
		"PGHOST":            "ignored-here",
	}
	tests := []struct {
		name       string
		flag       string
		env        map[string]string
		wantURL    string
		wantSource string
	}{
		{"flag wins over everything", "postgres://flag/db", all, "postgres://flag/db", "--database-url"},
		{"FLEET_DATABASE_URL wins over DATABASE_URL", "", all, "postgres://fleet/db", "$FLEET_DATABASE_URL"},
		{"DATABASE_URL", "", map[string]string{EnvDatabaseURL: "postgres://generic/db"}, "postgres://generic/db", "$DATABASE_URL"},
		{"empty variables do not count", "", map[string]string{EnvFleetDatabaseURL: "", EnvDatabaseURL: "postgres://generic/db"}, "postgres://generic/db", "$DATABASE_URL"},
		{"nothing: libpq's PG* variables", "", map[string]string{"PGHOST": "h"}, "", "PG* environment"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			url, source := resolveDatabaseURL(tt.flag, envMap(tt.env))
			require.Equal(t, tt.wantURL, url)
			require.Equal(t, tt.wantSource, source)
		})
	}
}

// TestPoolConfigLibpqEnvironment checks the last step of the precedence:
// with no URL, pgx reads PGHOST, PGPORT, PGUSER and PGDATABASE. It sets
// process environment variables, so it does not run in parallel.
func TestPoolConfigLibpqEnvironment(t *testing.T) {
	t.Setenv("PGHOST", "127.0.0.9")
	t.Setenv("PGPORT", "6543")
	t.Setenv("PGUSER", "operator")
	t.Setenv("PGDATABASE", "fleet")
	t.Setenv("PGAPPNAME", "")
	t.Setenv("PGCONNECT_TIMEOUT", "")
	t.Setenv("PGOPTIONS", "")
	url, source := resolveDatabaseURL("", envMap(nil))
	cfg, _, err := poolConfig(connSettings{url: url, source: source, statementTimeout: DefaultStatementTimeout, connectTimeout: DefaultConnectTimeout})
	require.NoError(t, err)
	require.Equal(t, "127.0.0.9", cfg.ConnConfig.Host)
	require.Equal(t, uint16(6543), cfg.ConnConfig.Port)
	require.Equal(t, "operator", cfg.ConnConfig.User)
	require.Equal(t, "fleet", cfg.ConnConfig.Database)

	// A URL still takes the parts it leaves out from PG* variables, as in libpq.
	cfg, _, err = poolConfig(connSettings{url: "postgres://db.internal/app", statementTimeout: time.Second, connectTimeout: time.Second})
	require.NoError(t, err)
	require.Equal(t, "db.internal", cfg.ConnConfig.Host)
	require.Equal(t, "operator", cfg.ConnConfig.User)

	// PGAPPNAME names the application.
	t.Setenv("PGAPPNAME", "mine")
	cfg, _, err = poolConfig(connSettings{statementTimeout: time.Second, connectTimeout: time.Second})
	require.NoError(t, err)
	require.Equal(t, "mine", cfg.ConnConfig.RuntimeParams["application_name"])
}

func TestPoolConfigSessionSettings(t *testing.T) {
	t.Parallel()
	const base = "postgres://u@127.0.0.1:5432/db"
	tests := []struct {
		name          string
		s             connSettings
		wantApp       string
		wantStatement string
		wantValue     string // the session's value, when not wantStatement
		wantNone      bool   // the session has no statement_timeout
		wantConnect   time.Duration
		wantDesc      string // what the statement-timeout hint says of it
	}{
		{
			name:          "defaults",
			s:             connSettings{url: base, statementTimeout: DefaultStatementTimeout, connectTimeout: DefaultConnectTimeout},
			wantApp:       "fleetctl",
			wantStatement: "10000",
			wantConnect:   5 * time.Second,
			wantDesc:      "10s, fleetctl's default (--statement-timeout sets it; 0 for none)",
		},
		{
			name:          "flags given",
			s:             connSettings{url: base, statementTimeout: 1500 * time.Millisecond, statementTimeoutSet: true, connectTimeout: 2 * time.Second, connectTimeoutSet: true},
			wantApp:       "fleetctl",
			wantStatement: "1500",
			wantConnect:   2 * time.Second,
			wantDesc:      "1.5s, from --statement-timeout (0 for none)",
		},
		{
			name:          "statement timeout 0 disables it",
			s:             connSettings{url: base, statementTimeout: 0, statementTimeoutSet: true, connectTimeout: time.Second},
			wantApp:       "fleetctl",
			wantStatement: "0",
			wantNone:      true,
			wantConnect:   time.Second,
			wantDesc:      "0s, from --statement-timeout (0 for none)",
		},
		{
			name:          "the URL's settings win over the flags' defaults",
			s:             connSettings{url: base + "?application_name=ops&statement_timeout=250&connect_timeout=7", statementTimeout: DefaultStatementTimeout, connectTimeout: DefaultConnectTimeout},
			wantApp:       "ops",
			wantStatement: "250",
			wantConnect:   7 * time.Second,
			wantDesc:      "250ms, from the connection string (--statement-timeout overrides it; 0 for none)",
		},
		{
			// Postgres reads a setting's name in any case; pgx sends
			// each spelling as it was written.
			name:          "the URL's setting in another case",
			s:             connSettings{url: base + "?Statement_Timeout=250", statementTimeout: DefaultStatementTimeout, connectTimeout: DefaultConnectTimeout},
			wantApp:       "fleetctl",
			wantStatement: "250",
			wantConnect:   DefaultConnectTimeout,
			wantDesc:      "250ms, from the connection string (--statement-timeout overrides it; 0 for none)",
		},
		{
			name:          "the URL's none, with a unit",
			s:             connSettings{url: base + "?statement_timeout=0ms", statementTimeout: DefaultStatementTimeout, connectTimeout: DefaultConnectTimeout},
			wantApp:       "fleetctl",
			wantStatement: "0ms",
			wantNone:      true,
			wantConnect:   DefaultConnectTimeout,
			wantDesc:      "0s, from the connection string (--statement-timeout overrides it; 0 for none)",
		},
		{
			name:          "the URL's value under a millisecond, which Postgres rounds to none",
			s:             connSettings{url: base + "?statement_timeout=400us", statementTimeout: DefaultStatementTimeout, connectTimeout: DefaultConnectTimeout},
			wantApp:       "fleetctl",
			wantStatement: "400us",
			wantNone:      true,
			wantConnect:   DefaultConnectTimeout,
			wantDesc:      "0s, from the connection string (--statement-timeout overrides it; 0 for none)",
		},
		{
			name:          "the URL's fraction, as the server reads it",
			s:             connSettings{url: base + "?statement_timeout=1.5s", statementTimeout: DefaultStatementTimeout, connectTimeout: DefaultConnectTimeout},
			wantApp:       "fleetctl",
			wantStatement: "1.5s",
			wantConnect:   DefaultConnectTimeout,
			wantDesc:      "1.5s, from the connection string (--statement-timeout overrides it; 0 for none)",
		},
		{
			// The server refuses it when connecting; the hint quotes it.
			name:          "the URL's value unread",
			s:             connSettings{url: base + "?statement_timeout=soon", statementTimeout: DefaultStatementTimeout, connectTimeout: DefaultConnectTimeout},
			wantApp:       "fleetctl",
			wantStatement: "soon",
			wantConnect:   DefaultConnectTimeout,
			wantDesc:      `"soon", from the connection string (--statement-timeout overrides it; 0 for none)`,
		},
		{
			// Not sent as a parameter, which the server would apply
			// after the options.
			name:          "the URL's options name the application",
			s:             connSettings{url: base + "?options=-c%20application_name%3Dops", statementTimeout: DefaultStatementTimeout, connectTimeout: DefaultConnectTimeout},
			wantApp:       "",
			wantStatement: "10000",
			wantConnect:   DefaultConnectTimeout,
			wantDesc:      "10s, fleetctl's default (--statement-timeout sets it; 0 for none)",
		},
		{
			name:          "the URL's options",
			s:             connSettings{url: base + "?options=-c%20search_path%3Da%5C%20b%20-cStatement-Timeout%3D5s", statementTimeout: DefaultStatementTimeout, connectTimeout: DefaultConnectTimeout},
			wantApp:       "fleetctl",
			wantConnect:   DefaultConnectTimeout,
			wantStatement: "",
			wantValue:     "5s",
			wantDesc:      "5s, from -c statement_timeout in the connection's options (--statement-timeout overrides it; 0 for none)",
		},
		{
			name:          "the URL's parameter wins over its options",
			s:             connSettings{url: base + "?options=-c%20statement_timeout%3D5s&statement_timeout=250", statementTimeout: DefaultStatementTimeout, connectTimeout: DefaultConnectTimeout},
			wantApp:       "fleetctl",
			wantStatement: "250",
			wantConnect:   DefaultConnectTimeout,
			wantDesc:      "250ms, from the connection string (--statement-timeout overrides it; 0 for none)",
		},
		{
			name:          "the flag wins over the options",
			s:             connSettings{url: base + "?options=-c%20statement_timeout%3D5s", statementTimeout: 3 * time.Second, statementTimeoutSet: true, connectTimeout: DefaultConnectTimeout},
			wantApp:       "fleetctl",
			wantStatement: "3000",
			wantConnect:   DefaultConnectTimeout,
			wantDesc:      "3s, from --statement-timeout (0 for none)",
		},
		{
			// As the flag would be written, not 500h0m0s.
			name:          "a flag of whole hours",
			s:             connSettings{url: base, statementTimeout: 500 * time.Hour, statementTimeoutSet: true, connectTimeout: DefaultConnectTimeout},
			wantApp:       "fleetctl",
			wantStatement: "1800000000",
			wantConnect:   DefaultConnectTimeout,
			wantDesc:      "500h, from --statement-timeout (0 for none)",
		},
		{
			name:          "the URL's minutes",
			s:             connSettings{url: base + "?statement_timeout=90min", statementTimeout: DefaultStatementTimeout, connectTimeout: DefaultConnectTimeout},
			wantApp:       "fleetctl",
			wantStatement: "90min",
			wantConnect:   DefaultConnectTimeout,
			wantDesc:      "1h30m, from the connection string (--statement-timeout overrides it; 0 for none)",
		},
		{
			name:          "flags given win over the URL",
			s:             connSettings{url: base + "?STATEMENT_TIMEOUT=250&connect_timeout=7", statementTimeout: 3 * time.Second, statementTimeoutSet: true, connectTimeout: time.Second, connectTimeoutSet: true},
			wantApp:       "fleetctl",
			wantStatement: "3000",
			wantConnect:   time.Second,
			wantDesc:      "3s, from --statement-timeout (0 for none)",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			cfg, timeout, err := poolConfig(tt.s)
			require.NoError(t, err)
			require.Equal(t, tt.wantApp, cfg.ConnConfig.RuntimeParams["application_name"])
			for k := range cfg.ConnConfig.RuntimeParams {
				if strings.EqualFold(k, "statement_timeout") {
					require.Equal(t, "statement_timeout", k, "one spelling is sent")
				}
			}
			require.Equal(t, tt.wantStatement, cfg.ConnConfig.RuntimeParams["statement_timeout"])
			value := tt.wantStatement
			if tt.wantValue != "" {
				value = tt.wantValue
			}
			require.Equal(t, sessionTimeout{value: value, desc: tt.wantDesc, none: tt.wantNone}, timeout)
			require.Equal(t, tt.wantConnect, cfg.ConnConfig.ConnectTimeout)
		})
	}
}

func TestPoolConfigInvalidURLIsUsageError(t *testing.T) {
	t.Parallel()
	_, _, err := poolConfig(connSettings{url: "postgres://u:secret@[::1", source: "$DATABASE_URL", connectTimeout: time.Second})
	require.Error(t, err)
	var ee *exitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, ExitUsage, ee.code)
	require.Contains(t, err.Error(), "invalid database URL from $DATABASE_URL")
	require.NotContains(t, err.Error(), "secret", "the password is not printed")
}

func TestEndpoint(t *testing.T) {
	t.Parallel()
	require.Equal(t, "127.0.0.1:5432", endpoint("127.0.0.1", 5432))
	require.Equal(t, "[::1]:5433", endpoint("::1", 5433))
	require.Equal(t, "/var/run/postgresql/.s.PGSQL.5432", endpoint("/var/run/postgresql", 5432))
}

// silentServer accepts connections on 127.0.0.1 and never answers, so a
// client waits until its own timeout.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var (
		mu    sync.Mutex
		conns []net.Conn
	)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		_ = ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			_ = c.Close()
		}
	})
	return ln.Addr().String()
}

// TestStatementTimeoutIsNamed: a statement that runs past the session's
// statement_timeout (here, waiting on a lock) fails with the flag that
// sets it named; Postgres's message names only the setting.
func TestStatementTimeoutIsNamed(t *testing.T) {
	t.Parallel()
	dsn := fleettest.DSN(t)
	pool, err := pgxpool.New(t.Context(), dsn)
	require.NoError(t, err)
	defer pool.Close()
	tx, err := pool.Begin(t.Context())
	require.NoError(t, err)
	defer func() { _ = tx.Rollback(context.Background()) }()
	_, err = tx.Exec(t.Context(), `LOCK TABLE fleetlimit.keys IN ACCESS EXCLUSIVE MODE`)
	require.NoError(t, err)

	_, stderr, code := runCLI(t, map[string]string{EnvFleetDatabaseURL: dsn}, "--statement-timeout", "200ms", "keys")
	require.Equal(t, ExitFailure, code, stderr)
	require.Contains(t, stderr, "canceling statement due to statement timeout (SQLSTATE 57014) (a statement ran past the session's statement_timeout: 200ms, from --statement-timeout (0 for none))")

	// A timeout the connection string sets is the one named.
	withTimeout := dsn + " statement_timeout=150"
	if u, err := url.Parse(dsn); err == nil && (u.Scheme == "postgres" || u.Scheme == "postgresql") {
		q := u.Query()
		q.Set("statement_timeout", "150")
		u.RawQuery = q.Encode()
		withTimeout = u.String()
	}
	_, stderr, code = runCLI(t, map[string]string{EnvFleetDatabaseURL: withTimeout}, "keys")
	require.Equal(t, ExitFailure, code, stderr)
	require.Contains(t, stderr, "(SQLSTATE 57014) (a statement ran past the session's statement_timeout: 150ms, from the connection string (--statement-timeout overrides it; 0 for none))")
}

// pgTimeouts are statement_timeout values with what Postgres 15 applies for
// each (SET statement_timeout = v; SHOW statement_timeout), -1 where it
// refuses the value.
var pgTimeouts = map[string]time.Duration{
	"0": 0, "250": 250 * time.Millisecond, "10s": 10 * time.Second, "10 s": 10 * time.Second, "7\tms": 7 * time.Millisecond,
	"  7ms  ": 7 * time.Millisecond, "2min": 2 * time.Minute, "1h": time.Hour, "1d": 24 * time.Hour, "596h": 596 * time.Hour,
	"1.5s": 1500 * time.Millisecond, ".5s": 500 * time.Millisecond, "5.": 5 * time.Millisecond, "1.5 min": 90 * time.Second,
	"0.4": 0, "0.5": 0, "1.5": 2 * time.Millisecond, "2.5": 2 * time.Millisecond, "1.4996": time.Millisecond,
	"400us": 0, "500us": 0, "600us": time.Millisecond, "1500us": 2 * time.Millisecond, "2500us": 2 * time.Millisecond,
	"1.2345ms": time.Millisecond, "1.4996ms": 2 * time.Millisecond, "0.0014996s": time.Millisecond, "0.0004s": 0,
	"1e3": time.Second, "1E3": time.Second, "0.5e1": 5 * time.Millisecond, "1.5e0s": 1500 * time.Millisecond, "1e-3s": time.Millisecond,
	"0x10": 16 * time.Millisecond, "010": 8 * time.Millisecond, "+5": 5 * time.Millisecond, "0x7fffffff": maxStatementTimeout,
	"2147483647": maxStatementTimeout, "2147483647.4": maxStatementTimeout,
	"": -1, "s": -1, "10x": -1, "1.5S": -1, "-1": -1, "2147483648": -1, "597h": -1, "1e10": -1, "1e400": -1,
	"99999999999999999d": -1, "99999999999999999999": -1, "08": -1, "0x": -1, "nan": -1, "inf": -1, "soon": -1, "1.5s x": -1,
	" .5": -1, "+.5": -1, "-.5": -1, "1e-400": -1, "1e-320": -1, "e5": -1, "0e-400": 0, " 5": 5 * time.Millisecond,
}

// TestPGTimeoutReadsAsThePostgresServer: pgTimeout gives the timeout the
// server applies, rounding included, and refuses what it refuses.
func TestPGTimeoutReadsAsThePostgresServer(t *testing.T) {
	t.Parallel()
	for v, want := range pgTimeouts {
		got, ok := pgTimeout(v)
		if want < 0 {
			require.False(t, ok, "%q read as %v", v, got)
			continue
		}
		require.True(t, ok, "%q", v)
		require.Equal(t, want, got, "%q", v)
	}
}

// TestPGTimeoutsAreTheServers checks the table of
// TestPGTimeoutReadsAsThePostgresServer against a real server.
func TestPGTimeoutsAreTheServers(t *testing.T) {
	t.Parallel()
	pool, err := pgxpool.New(t.Context(), fleettest.DSN(t))
	require.NoError(t, err)
	defer pool.Close()
	for v, want := range pgTimeouts {
		var ms int64
		// Set for the statement's own transaction: a session's timeout
		// of a millisecond could cancel the next value's statement.
		err := pool.QueryRow(t.Context(), `SELECT set_config('statement_timeout', $1, true)::text IS NOT NULL,
			(SELECT setting::bigint FROM pg_settings WHERE name = 'statement_timeout')`, v).Scan(new(bool), &ms)
		if want < 0 {
			require.Error(t, err, "%q", v)
			continue
		}
		require.NoError(t, err, "%q", v)
		require.Equal(t, want, time.Duration(ms)*time.Millisecond, "%q", v)
	}
}

func TestOptionsSetting(t *testing.T) {
	t.Parallel()
	for opts, want := range map[string]string{
		"-c statement_timeout=5s":       "5s",
		"-cstatement_timeout=5s":        "5s",
		"--statement-timeout=5s":        "5s",
		"  -c   STATEMENT_TIMEOUT=5s  ": "5s",
		"-c search_path=a\\ b -c statement_timeout=1s --statement_timeout=9s": "9s",
		"-c statement_timeout=1\\ s":                                          "1 s",
		"-c statement_timeout=":                                               "",
		"-ec statement_timeout=5s":                                            "5s",
		"-Pcstatement_timeout=5s":                                             "5s",
		"-B 100 -c statement_timeout=5s":                                      "5s",
		"-B -c -c statement_timeout=5s":                                       "5s",
	} {
		got, ok := optionsSetting(opts, "statement_timeout")
		require.True(t, ok, "%q", opts)
		require.Equal(t, want, got, "%q", opts)
	}
	for _, opts := range []string{"", "-c", "-c statement_timeout", "-c lock_timeout=5s", "statement_timeout=5s",
		"-c a\\ statement_timeout=5s", "-B 100", "-B -cstatement_timeout=5s", "-xc statement_timeout=5s"} {
		_, ok := optionsSetting(opts, "statement_timeout")
		require.False(t, ok, "%q", opts)
	}
}

// TestOptionsTimeoutIsTheSessions: a statement_timeout the connection's
// options set is the one the session runs with, and the one named.
func TestOptionsTimeoutIsTheSessions(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(fleettest.DSN(t))
	require.NoError(t, err)
	// libpq and pgx read a + in a URL as itself, not as a space.
	u.RawQuery = strings.TrimPrefix(u.RawQuery+"&options=-c%20statement_timeout%3D1.5s", "&")
	cfg, timeout, err := poolConfig(connSettings{url: u.String(), statementTimeout: DefaultStatementTimeout, connectTimeout: DefaultConnectTimeout})
	require.NoError(t, err)
	require.Equal(t, "1.5s, from -c statement_timeout in the connection's options (--statement-timeout overrides it; 0 for none)", timeout.desc)
	pool, err := pgxpool.NewWithConfig(t.Context(), cfg)
	require.NoError(t, err)
	defer pool.Close()
	var shown string
	require.NoError(t, pool.QueryRow(t.Context(), `SHOW statement_timeout`).Scan(&shown))
	require.Equal(t, "1500ms", shown)
}

// TestConnectTimeoutOutOfRange: a connect_timeout pgx would multiply past
// a Duration is a usage error naming it, not a timeout of a negative time.
func TestConnectTimeoutOutOfRange(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct{ url, value string }{
		{"postgres://u@127.0.0.1:1/x?connect_timeout=9223372037", `"9223372037"`},
		{"postgres://u@127.0.0.1:1/x?connect_timeout=99999999999999999", `"99999999999999999"`},
		{"host=127.0.0.1 port=1 connect_timeout=9223372037", `"9223372037"`},
		{"host=127.0.0.1 port=1 connect_timeout='9223372037'", `"9223372037"`},
		{"postgres://u@127.0.0.1:1/x?connect_timeout=36028797018963969", `"36028797018963969"`}, // wraps to 1s
		{"postgres://u:pa#ss@127.0.0.1:1/x?connect_timeout=9223372037", `"9223372037"`},
	} {
		_, _, err := poolConfig(connSettings{url: tt.url, source: "--database-url", statementTimeout: DefaultStatementTimeout, connectTimeout: DefaultConnectTimeout})
		var ee *exitError
		require.ErrorAs(t, err, &ee, tt.url)
		require.Equal(t, ExitUsage, ee.code)
		require.EqualError(t, err, "invalid connect_timeout "+tt.value+" from --database-url: want whole seconds up to 9223372036")
	}
}

// TestServiceFileConnectTimeoutOutOfRange: a service file's
// connect_timeout, which pgx takes over $PGCONNECT_TIMEOUT, is checked as
// the connection string's is: past a Duration it is a usage error naming
// it and the service, not one naming the environment, nor a timeout of the
// time it wraps to; one in range stands, whatever $PGCONNECT_TIMEOUT says.
func TestServiceFileConnectTimeoutOutOfRange(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "PG") {
			t.Setenv(name, "")
			require.NoError(t, os.Unsetenv(name))
		}
	}
	dir := t.TempDir()
	file := filepath.Join(dir, "pg_service.conf")
	require.NoError(t, os.WriteFile(file, []byte("[big]\nhost=127.0.0.1\nport=1\nconnect_timeout=99999999999999\n"+
		"[wraps]\nhost=127.0.0.1\nport=1\nconnect_timeout=36028797018963969\n"+
		"[fine]\nhost=127.0.0.1\nport=1\nconnect_timeout=7\n"+
		"[negative]\nhost=127.0.0.1\nport=1\nconnect_timeout=-1\n"), 0o600))
	settings := func(url, source string) connSettings {
		return connSettings{url: url, source: source, statementTimeout: DefaultStatementTimeout, connectTimeout: DefaultConnectTimeout}
	}
	refused := func(s connSettings, want string) {
		t.Helper()
		_, _, err := poolConfig(s)
		var ee *exitError
		require.ErrorAs(t, err, &ee, s.url)
		require.Equal(t, ExitUsage, ee.code)
		require.EqualError(t, err, want)
	}
	for _, tt := range []struct{ url, value, service string }{
		{"service=big servicefile=" + file, "99999999999999", "big"},
		{"postgres:///x?service=big&servicefile=" + url.QueryEscape(file), "99999999999999", "big"},
		{"service='wraps' servicefile='" + file + "'", "36028797018963969", "wraps"}, // wraps to 1s
		{"service=negative servicefile=" + file, "-1", "negative"},                   // refused by pgx
	} {
		refused(settings(tt.url, "--database-url"), fmt.Sprintf("invalid connect_timeout %q from service %q in %s: want whole seconds up to 9223372036",
			tt.value, tt.service, file))
	}

	// Read as pgx reads the string: a '+' in a path is a '+', a
	// backslash escapes a space, and an '&' in a keyword/value string is
	// part of a value.
	odd := filepath.Join(dir, "a+b", "my dir")
	require.NoError(t, os.MkdirAll(odd, 0o700))
	oddFile := filepath.Join(odd, "pg_service.conf")
	conf, err := os.ReadFile(file)
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(oddFile, conf, 0o600))
	escaped := strings.ReplaceAll(oddFile, " ", `\ `)
	for _, tt := range []struct{ url, value, service string }{
		{"service=big servicefile=" + escaped, "99999999999999", "big"},
		{"service=wraps servicefile=" + escaped, "36028797018963969", "wraps"},
		{"postgres:///x?service=wraps&servicefile=" + strings.ReplaceAll(oddFile, " ", "%20"), "36028797018963969", "wraps"},
	} {
		refused(settings(tt.url, "--database-url"), fmt.Sprintf("invalid connect_timeout %q from service %q in %s: want whole seconds up to 9223372036",
			tt.value, tt.service, oddFile))
	}
	t.Setenv("PGSERVICEFILE", file)
	cfg, _, err := poolConfig(settings("host=127.0.0.1 port=1 password=p&service=big", "--database-url"))
	require.NoError(t, err, "no service: the password is p&service=big")
	require.Equal(t, "p&service=big", cfg.ConnConfig.Password)
	// A URL's '#' is a character, and a '?' before the '@' is the
	// password's.
	for _, u := range []string{
		"postgres://127.0.0.1:1/x?application_name=a#&connect_timeout=36028797018963969",
		"postgres://u:p?q@127.0.0.1:1/x?connect_timeout=36028797018963969",
	} {
		refused(settings(u, "--database-url"), `invalid connect_timeout "36028797018963969" from --database-url: want whole seconds up to 9223372036`)
	}

	// Named by the environment, and over a $PGCONNECT_TIMEOUT in range.
	t.Setenv("PGSERVICEFILE", file)
	t.Setenv("PGSERVICE", "big")
	t.Setenv("PGCONNECT_TIMEOUT", "3")
	refused(settings("", sourceLibpqEnv), fmt.Sprintf(`invalid connect_timeout "99999999999999" from service "big" in %s: want whole seconds up to 9223372036`, file))
	// The connection string's own still comes first.
	cfg, _, err = poolConfig(settings("connect_timeout=2", "--database-url"))
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, cfg.ConnConfig.ConnectTimeout)
	// A service's in range stands over a $PGCONNECT_TIMEOUT out of range,
	// which pgx does not read then.
	t.Setenv("PGSERVICE", "fine")
	t.Setenv("PGCONNECT_TIMEOUT", "99999999999999")
	cfg, _, err = poolConfig(settings("", sourceLibpqEnv))
	require.NoError(t, err)
	require.Equal(t, 7*time.Second, cfg.ConnConfig.ConnectTimeout)
}

// TestConnectTimeoutFlagBoundsTheDial: --connect-timeout replaces the
// connection string's connect_timeout for the dial too, and the error
// names the time it waited. The server is a socket whose backlog is full,
// so a dial hangs until its timeout.
func TestConnectTimeoutFlagBoundsTheDial(t *testing.T) {
	t.Parallel()
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	defer syscall.Close(fd)
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Addr: [4]byte{127, 0, 0, 1}}))
	require.NoError(t, syscall.Listen(fd, 0))
	sa, err := syscall.Getsockname(fd)
	require.NoError(t, err)
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(sa.(*syscall.SockaddrInet4).Port))
	// Fill the backlog until a dial hangs.
	full := false
	for range 8 {
		c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond)
		if err != nil {
			full = true
			break
		}
		defer c.Close()
	}
	require.True(t, full, "the backlog of %s never filled", addr)

	s := connSettings{url: "postgres://u@" + addr + "/x?sslmode=disable&connect_timeout=1", source: "--database-url",
		statementTimeout: DefaultStatementTimeout, connectTimeout: 3 * time.Second, connectTimeoutSet: true}
	cfg, _, err := poolConfig(s)
	require.NoError(t, err)
	start := time.Now()
	_, err = connect(t.Context(), cfg)
	elapsed := time.Since(start)
	require.EqualError(t, err, "cannot connect to "+addr+": timed out after 3s")
	require.GreaterOrEqual(t, elapsed, 2500*time.Millisecond, "the URL's 1s ended the dial")
}

// TestInvalidPGEnvironmentNamesTheVariables: settings the PG* variables
// make and pgx refuses are named, the password only as set.
func TestInvalidPGEnvironmentNamesTheVariables(t *testing.T) {
	for _, kv := range os.Environ() {
		if name, _, _ := strings.Cut(kv, "="); strings.HasPrefix(name, "PG") {
			t.Setenv(name, "")
			require.NoError(t, os.Unsetenv(name))
		}
	}
	t.Setenv("PGHOST", "127.0.0.1")
	t.Setenv("PGPORT", "abc")
	t.Setenv("PGPASSWORD", "secret")
	_, _, err := poolConfig(connSettings{source: sourceLibpqEnv, statementTimeout: DefaultStatementTimeout, connectTimeout: DefaultConnectTimeout})
	var ee *exitError
	require.ErrorAs(t, err, &ee)
	require.Equal(t, ExitUsage, ee.code)
	require.EqualError(t, err, `invalid connection settings from the PG* environment (PGHOST="127.0.0.1" PGPASSWORD set PGPORT="abc"): invalid port`)
}

// TestRefusedSettingIsAUsageError: a setting of the connection string the
// server refuses as the session starts is a usage error naming it, not a
// failure to connect.
func TestRefusedSettingIsAUsageError(t *testing.T) {
	t.Parallel()
	u, err := url.Parse(fleettest.DSN(t))
	require.NoError(t, err)
	for query, want := range map[string]string{
		"statement_timeout=08":             `invalid value for parameter "statement_timeout": "08"`,
		"options=-c%20no_such_setting%3D1": `unrecognized configuration parameter "no_such_setting"`,
	} {
		bad := *u
		bad.RawQuery = strings.TrimPrefix(u.RawQuery+"&"+query, "&")
		_, stderr, code := runCLI(t, map[string]string{EnvFleetDatabaseURL: bad.String()}, "keys")
		require.Equal(t, ExitUsage, code, stderr)
		require.Contains(t, stderr, "fleetctl: the server at "+u.Host+" refuses a setting of the connection (its string, its options or a PG* variable): "+want+"\n")
	}
}
