package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
	ucli "github.com/urfave/cli/v2"
)

// The environment variables that name the database, in precedence order
// after the --database-url flag.
const (
	EnvFleetDatabaseURL = "FLEET_DATABASE_URL"
	EnvDatabaseURL      = "DATABASE_URL"
)

// Where a connection string came from.
const (
	sourceFlag     = "--database-url"
	sourceLibpqEnv = "PG* environment"
)

// resolveDatabaseURL picks the connection string: the flag, else
// FLEET_DATABASE_URL, else DATABASE_URL, else "" (pgx then reads libpq's PG*
// variables and defaults); an empty variable counts as unset, a blank one
// does not (openPool refuses it). source says which one won.
func resolveDatabaseURL(flagValue string, getenv func(string) string) (url, source string) {
	if flagValue != "" {
		return flagValue, sourceFlag
	}
	for _, name := range []string{EnvFleetDatabaseURL, EnvDatabaseURL} {
		if v := getenv(name); v != "" {
			return v, "$" + name
		}
	}
	return "", sourceLibpqEnv
}

// maxStatementTimeout is the longest statement_timeout Postgres accepts:
// INT_MAX milliseconds.
const maxStatementTimeout = math.MaxInt32 * time.Millisecond

// statementTimeoutWant is the range of --statement-timeout, as its errors
// give it.
var statementTimeoutWant = fmt.Sprintf("want 0 (no timeout) or whole milliseconds in [1ms, %s]", maxStatementTimeout)

// connSettings is what the connection flags say.
type connSettings struct {
	url, source string
	// statementTimeout and connectTimeout are the flag values; the *Set
	// fields say whether they were given explicitly.
	statementTimeout, connectTimeout       time.Duration
	statementTimeoutSet, connectTimeoutSet bool
}

// connSettingsFrom reads the connection flags of c (defined on the app).
func (r *runner) connSettingsFrom(c *ucli.Context) (connSettings, error) {
	s := connSettings{
		statementTimeout:    c.Duration(flagStatementTimeout),
		connectTimeout:      c.Duration(flagConnectTimeout),
		statementTimeoutSet: c.IsSet(flagStatementTimeout),
		connectTimeoutSet:   c.IsSet(flagConnectTimeout),
	}
	if v := c.String(flagDatabaseURL); c.IsSet(flagDatabaseURL) && strings.TrimSpace(v) == "" {
		// An unset variable in a script ("--database-url $URL"): never
		// fall back to another database than the one meant.
		if v != "" {
			return s, globalUsageErrorf("blank value %q for --%s: give a connection string, or leave the flag out", v, flagDatabaseURL)
		}
		return s, globalUsageErrorf("empty value for --%s: give a connection string, or leave the flag out", flagDatabaseURL)
	}
	s.url, s.source = resolveDatabaseURL(c.String(flagDatabaseURL), r.env.Getenv)
	if t := s.statementTimeout; t != 0 && (t < time.Millisecond || t > maxStatementTimeout) || t%time.Millisecond != 0 {
		return s, globalUsageErrorf("invalid value %s for --%s: %s", s.statementTimeout, flagStatementTimeout, statementTimeoutWant)
	}
	if s.connectTimeout <= 0 {
		return s, globalUsageErrorf("invalid value %s for --%s: want > 0", s.connectTimeout, flagConnectTimeout)
	}
	return s, nil
}

// poolConfig parses s into a pool configuration with fleetctl's session
// settings: application_name=fleetctl unless the connection string (or
// PGAPPNAME) names one; statement_timeout from the flag when given, else
// from the connection string (its name in any case, as Postgres reads it),
// else the flag's default; the connect timeout likewise. It also describes
// the statement_timeout the sessions run with, for timeoutHint. A
// connection string pgx cannot parse is a usage error naming its source.
func poolConfig(s connSettings) (*pgxpool.Config, sessionTimeout, error) {
	cfg, err := pgxpool.ParseConfig(s.url)
	if err != nil {
		return nil, sessionTimeout{}, globalUsageErrorf("invalid database URL from %s: %v", s.source, err)
	}
	params := cfg.ConnConfig.RuntimeParams
	if params["application_name"] == "" {
		params["application_name"] = appName
	}
	timeout := sessionTimeout{value: strconv.FormatInt(s.statementTimeout.Milliseconds(), 10), none: s.statementTimeout == 0}
	timeout.desc = fmt.Sprintf("%v, fleetctl's default (--%s sets it; 0 for none)", s.statementTimeout, flagStatementTimeout)
	if s.statementTimeoutSet {
		timeout.desc = fmt.Sprintf("%v, from --%s (0 for none)", s.statementTimeout, flagStatementTimeout)
	}
	// pgx keeps the names as written and sends each: one spelling only,
	// or the server would take whichever came last. Without the flag, the
	// connection string's first in byte order is the one.
	fromURL := false
	for _, k := range slices.Sorted(maps.Keys(params)) {
		if !strings.EqualFold(k, "statement_timeout") {
			continue
		}
		if v := params[k]; !s.statementTimeoutSet && !fromURL {
			fromURL, timeout.value = true, v
			// As Postgres reads it: a number without a unit is
			// milliseconds, and a finer unit is rounded to them (half
			// to even), so 400us is none.
			shown := strconv.Quote(v)
			if d, ok := pgDuration(v); ok {
				d = time.Duration(math.RoundToEven(float64(d)/float64(time.Millisecond))) * time.Millisecond
				shown, timeout.none = d.String(), d == 0
			}
			timeout.desc = fmt.Sprintf("%s, from the connection string (--%s overrides it; 0 for none)", shown, flagStatementTimeout)
		}
		delete(params, k)
	}
	params["statement_timeout"] = timeout.value
	if cfg.ConnConfig.ConnectTimeout == 0 || s.connectTimeoutSet {
		cfg.ConnConfig.ConnectTimeout = s.connectTimeout
	}
	cfg.MaxConns = 4
	cfg.MinConns = 0
	return cfg, timeout, nil
}

// sessionTimeout is the statement_timeout fleetctl's sessions run with:
// its value as sent (the flag's in milliseconds, as Postgres reads a
// number without a unit, or the connection string's as written there),
// whether it is none (0, with a unit or not), and a description naming
// the duration, its source and how to change it, for the hint of a
// statement that ran past it (see timeoutHint). The zero value is one not
// known: no pool was configured.
type sessionTimeout struct {
	value, desc string
	none        bool
}

// openPool connects to the database c's flags and the environment name, and
// checks that it answers within the connect timeout. An unreachable database
// is an error naming its host and port and the cause, in one line.
func (r *runner) openPool(c *ucli.Context) (*pgxpool.Pool, error) {
	s, err := r.connSettingsFrom(c)
	if err != nil {
		return nil, err
	}
	if s.url != "" && strings.TrimSpace(s.url) == "" {
		// Blank, not empty: a quoting slip, not an unset variable. The
		// next source would name another database than the one meant.
		// (demo, which uses no variable, does not ask.)
		return nil, globalUsageErrorf("blank value %q for %s: give a connection string, or unset it", s.url, s.source)
	}
	cfg, timeout, err := poolConfig(s)
	if err != nil {
		return nil, err
	}
	r.timeout = timeout
	pool, err := connect(c.Context, cfg)
	var ee *exitError
	noPGEnv := os.Getenv("PGHOST") == "" && os.Getenv("PGSERVICE") == "" && os.Getenv("PGPORT") == ""
	if s.url == "" && noPGEnv && errors.As(err, &ee) && ee.hint == "" {
		ee.hint = fmt.Sprintf("No database was given: name one with --database-url or $%s (or $%s, or libpq's PG* variables).",
			EnvFleetDatabaseURL, EnvDatabaseURL)
	}
	return pool, err
}

// connect opens a pool for cfg and pings it, all within cfg's connect
// timeout.
func connect(ctx context.Context, cfg *pgxpool.Config) (*pgxpool.Pool, error) {
	timeout := cfg.ConnConfig.ConnectTimeout
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, connectError(cfg, timeout, err)
	}
	pingCtx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		if ctx.Err() != nil {
			return nil, ctx.Err()
		}
		return nil, connectError(cfg, timeout, err)
	}
	return pool, nil
}

// connectError describes a failed connection in one line: "cannot connect
// to HOST:PORT: CAUSE".
func connectError(cfg *pgxpool.Config, timeout time.Duration, err error) error {
	return &exitError{
		code:   ExitFailure,
		global: true,
		err:    fmt.Errorf("cannot connect to %s: %s", endpoint(cfg.ConnConfig.Host, cfg.ConnConfig.Port), connectCause(err, timeout)),
	}
}

// endpoint names a server: host:port, or the socket file for a unix
// socket directory.
func endpoint(host string, port uint16) string {
	if strings.HasPrefix(host, "/") {
		return fmt.Sprintf("%s/.s.PGSQL.%d", strings.TrimSuffix(host, "/"), port)
	}
	return net.JoinHostPort(host, strconv.Itoa(int(port)))
}

// connectCause is the innermost useful reason of a connection error: the
// server's message, the system call's error ("connection refused"), "no
// such host", or a timeout.
func connectCause(err error, timeout time.Duration) string {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) {
		return pgErr.Message
	}
	if errors.Is(err, context.DeadlineExceeded) || isTimeout(err) {
		return fmt.Sprintf("timed out after %s", timeout)
	}
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return dnsErr.Err
	}
	var errno syscall.Errno
	if errors.As(err, &errno) {
		return errno.Error()
	}
	var opErr *net.OpError
	if errors.As(err, &opErr) && opErr.Err != nil {
		return opErr.Err.Error()
	}
	// pgconn's messages look like "failed to connect to `user=... database=...`:
	// 127.0.0.1:5432 (127.0.0.1): server error: ..."; keep the last part.
	msg := err.Error()
	if i := strings.LastIndex(msg, ": "); i >= 0 && i+2 < len(msg) {
		return msg[i+2:]
	}
	return msg
}

func isTimeout(err error) bool {
	var t interface{ Timeout() bool }
	return errors.As(err, &t) && t.Timeout()
}
