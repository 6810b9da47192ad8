package cli

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/jackc/pgservicefile"
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
var statementTimeoutWant = fmt.Sprintf("want 0 (no timeout) or whole milliseconds in [1ms, %s]", writtenDuration(maxStatementTimeout))

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
		return s, globalUsageErrorf("invalid value %s for --%s: %s", writtenDuration(s.statementTimeout), flagStatementTimeout, statementTimeoutWant)
	}
	if s.connectTimeout <= 0 {
		return s, globalUsageErrorf("invalid value %s for --%s: want > 0", writtenDuration(s.connectTimeout), flagConnectTimeout)
	}
	return s, nil
}

// poolConfig parses s into a pool configuration with fleetctl's session
// settings: application_name=fleetctl unless the connection string (or
// PGAPPNAME, or its options) names one; statement_timeout from the flag when given, else
// from the connection string (its name in any case, as Postgres reads it),
// else from -c statement_timeout in its options (or $PGOPTIONS), else the
// flag's default; the connect timeout likewise. It also describes
// the statement_timeout the sessions run with, for timeoutHint. A
// connection string pgx cannot parse is a usage error naming its source.
func poolConfig(s connSettings) (*pgxpool.Config, sessionTimeout, error) {
	cfg, err := pgxpool.ParseConfig(s.url)
	if err != nil {
		if raw, from := connectTimeoutSetting(s.url, s.source); from != s.source && strings.Contains(err.Error(), "invalid connect_timeout") {
			// Not the string's own: a service's, or the environment's.
			return nil, sessionTimeout{}, invalidConnectTimeout(raw, from)
		}
		if s.url == "" {
			// pgx names the empty string it parsed, not the variables.
			msg := strings.TrimPrefix(err.Error(), "cannot parse ``: ")
			return nil, sessionTimeout{}, globalUsageErrorf("invalid connection settings from the %s (%s): %s", s.source, pgEnvSet(), msg)
		}
		if set := pgEnvSet(); set != "none set" {
			// They fill in what the string leaves out.
			return nil, sessionTimeout{}, globalUsageErrorf("invalid database URL from %s (with the %s: %s): %v", s.source, sourceLibpqEnv, set, err)
		}
		return nil, sessionTimeout{}, globalUsageErrorf("invalid database URL from %s: %v", s.source, err)
	}
	params := cfg.ConnConfig.RuntimeParams
	if _, ok := optionsSetting(params["options"], "application_name"); params["application_name"] == "" && !ok {
		params["application_name"] = appName
	}
	timeout := sessionTimeout{value: strconv.FormatInt(s.statementTimeout.Milliseconds(), 10), none: s.statementTimeout == 0}
	timeout.desc = fmt.Sprintf("%s, fleetctl's default (--%s sets it; 0 for none)", writtenDuration(s.statementTimeout), flagStatementTimeout)
	if s.statementTimeoutSet {
		timeout.desc = fmt.Sprintf("%s, from --%s (0 for none)", writtenDuration(s.statementTimeout), flagStatementTimeout)
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
			shown, none := serverTimeout(v)
			timeout.none = none
			timeout.desc = fmt.Sprintf("%s, from the connection string (--%s overrides it; 0 for none)", shown, flagStatementTimeout)
		}
		delete(params, k)
	}
	if v, ok := optionsSetting(params["options"], "statement_timeout"); ok && !s.statementTimeoutSet && !fromURL {
		// The server applies the options' own; sent as a parameter
		// too, the default would override it.
		shown, none := serverTimeout(v)
		timeout = sessionTimeout{value: v, none: none,
			desc: fmt.Sprintf("%s, from -c statement_timeout in the connection's options (--%s overrides it; 0 for none)", shown, flagStatementTimeout)}
	} else {
		params["statement_timeout"] = timeout.value
	}
	// pgx multiplies the seconds into a Duration without a check. The
	// value read here names the setting only if pgx read the same: where
	// the two readings differ, pgx's stands.
	raw, from := connectTimeoutSetting(s.url, s.source)
	n, err := strconv.ParseInt(raw, 10, 64)
	d := cfg.ConnConfig.ConnectTimeout
	same := err == nil && time.Duration(n)*time.Second == d
	switch {
	case same && n > maxConnectTimeout:
		return nil, sessionTimeout{}, invalidConnectTimeout(raw, from)
	case d < 0 || d%time.Second != 0:
		return nil, sessionTimeout{}, globalUsageErrorf("invalid connect_timeout: more than %d seconds, read as %s "+
			"(from the connection string, its service or $PGCONNECT_TIMEOUT): want whole seconds up to %d",
			maxConnectTimeout, writtenDuration(d), maxConnectTimeout)
	}
	if cfg.ConnConfig.ConnectTimeout == 0 || s.connectTimeoutSet {
		// The dial's own timeout is the connection string's too.
		cfg.ConnConfig.ConnectTimeout = s.connectTimeout
		cfg.ConnConfig.DialFunc = (&net.Dialer{Timeout: s.connectTimeout}).DialContext
	}
	cfg.MaxConns = 4
	cfg.MinConns = 0
	return cfg, timeout, nil
}

// serverTimeout shows a statement_timeout setting v as the server applies
// it (400us and 0.4 are none), or quoted as written when the server would
// refuse it, and reports whether it is none.
func serverTimeout(v string) (shown string, none bool) {
	if d, ok := pgTimeout(v); ok {
		return writtenDuration(d), d == 0
	}
	return strconv.Quote(v), false
}

// pgEnvSet lists the PG* variables pgx reads that are set, as NAME=value
// (a password as NAME set), in order, for an error about the settings
// they make; "none set" if none is.
func pgEnvSet() string {
	var set []string
	for _, name := range pgEnv {
		switch v := os.Getenv(name); {
		case v == "":
		case strings.HasSuffix(name, "PASSWORD"):
			set = append(set, name+" set")
		default:
			set = append(set, name+"="+strconv.Quote(v))
		}
	}
	if len(set) == 0 {
		return "none set"
	}
	return strings.Join(set, " ")
}

// pgEnv are the libpq variables pgx reads, in order.
var pgEnv = []string{"PGAPPNAME", "PGCHANNELBINDING", "PGCONNECT_TIMEOUT", "PGDATABASE", "PGHOST", "PGMAXPROTOCOLVERSION",
	"PGMINPROTOCOLVERSION", "PGOPTIONS", "PGPASSFILE", "PGPASSWORD", "PGPORT", "PGREQUIREAUTH", "PGSERVICE", "PGSERVICEFILE",
	"PGSSLCERT", "PGSSLCERTMODE", "PGSSLKEY", "PGSSLMODE", "PGSSLNEGOTIATION", "PGSSLPASSWORD", "PGSSLROOTCERT", "PGSSLSNI",
	"PGTARGETSESSIONATTRS", "PGTZ", "PGUSER"}

// maxConnectTimeout is the most seconds of a connect_timeout that pgx
// turns into a Duration without wrapping.
const maxConnectTimeout = int64(math.MaxInt64 / time.Second)

// invalidConnectTimeout is the usage error for a connect_timeout raw,
// from the source named, that pgx refuses or would wrap.
func invalidConnectTimeout(raw, from string) error {
	return globalUsageErrorf("invalid connect_timeout %q from %s: want whole seconds up to %d", raw, from, maxConnectTimeout)
}

// connectTimeoutSetting returns the connect_timeout pgx takes, as
// written, with where it came from, for an error naming it. pgx's order:
// the connection string s's (from source), else the one of the service
// that s or $PGSERVICE names in its service file, else $PGCONNECT_TIMEOUT.
func connectTimeoutSetting(s, source string) (value, from string) {
	if v, ok := connStringSetting(s, "connect_timeout"); ok {
		return v, source
	}
	if v, from, ok := serviceSetting(s, "connect_timeout"); ok {
		return v, from
	}
	return os.Getenv("PGCONNECT_TIMEOUT"), "$PGCONNECT_TIMEOUT"
}

// connStringSetting returns the last value the connection string s (a URL
// or keyword/value) gives the setting key, decoded as pgx decodes it: a
// URL's query percent-decoded ('+' stays '+'), a keyword/value string's
// values unquoted and their backslash escapes undone ('&' is no
// separator there). false when s does not set it, or cannot be read.
func connStringSetting(s, key string) (string, bool) {
	if strings.HasPrefix(s, "postgres://") || strings.HasPrefix(s, "postgresql://") {
		return urlQuerySetting(s, key)
	}
	return keywordValueSetting(s, key)
}

// urlQuerySetting returns the last value a URL's query gives key, as pgx
// finds it: past the user information (up to the first '@' before any
// '/'), after the first '?', with no fragment ('#' is a character like
// any other), each part decoded by uriDecode.
func urlQuerySetting(s, key string) (value string, found bool) {
	rest := s[strings.Index(s, "://")+len("://"):]
	if i := strings.IndexAny(rest, "@/"); i >= 0 && rest[i] == '@' {
		rest = rest[i+1:]
	}
	_, query, ok := strings.Cut(rest, "?")
	if !ok {
		return "", false
	}
	for pair := range strings.SplitSeq(query, "&") {
		k, v, ok := strings.Cut(pair, "=")
		if !ok {
			continue
		}
		if k, ok := uriDecode(k); !ok || k != key {
			continue
		}
		if v, ok := uriDecode(v); ok {
			value, found = v, true
		}
	}
	return value, found
}

// uriDecode percent-decodes a URL's part as pgx does: spaces around it
// trimmed, none inside, no %00; false for what pgx refuses.
func uriDecode(raw string) (string, bool) {
	raw = strings.Trim(raw, " ")
	if strings.Contains(raw, " ") || strings.Contains(raw, "%00") {
		return "", false
	}
	v, err := url.PathUnescape(raw)
	return v, err == nil
}

// keywordValueSetting returns the last value a keyword/value string gives
// key, as pgx reads one: a value is quoted ('…', with \' and \\) or runs
// to the next space, a backslash escaping the character after it.
func keywordValueSetting(s, key string) (value string, found bool) {
	const spaces = " \t\n\r\v\f"
	for s = strings.TrimLeft(s, spaces); s != ""; s = strings.TrimLeft(s, spaces) {
		eq := strings.IndexByte(s, '=')
		if eq < 0 {
			return value, found
		}
		k := strings.Trim(s[:eq], spaces)
		s = strings.TrimLeft(s[eq+1:], spaces)
		quoted := strings.HasPrefix(s, "'")
		if quoted {
			s = s[1:]
		}
		var v strings.Builder
		i := 0
		for ; i < len(s); i++ {
			c := s[i]
			if quoted && c == '\'' || !quoted && strings.IndexByte(spaces, c) >= 0 {
				break
			}
			if c == '\\' {
				if i++; i == len(s) {
					break
				}
				c = s[i]
			}
			v.WriteByte(c)
		}
		if quoted && i == len(s) {
			return value, found // unterminated: pgx refuses it
		}
		if quoted {
			i++
		}
		s = s[min(i, len(s)):]
		if k == key {
			value, found = v.String(), true
		}
	}
	return value, found
}

// serviceSetting returns the setting key of the service that the
// connection string s, else $PGSERVICE, names, as its service file
// (s's servicefile, else $PGSERVICEFILE, else ~/.pg_service.conf) writes
// it, with where it came from; false without a service, or one that does
// not set it. pgx takes a service's settings over the PG* variables, and
// has read the file already: one it could not read failed the connection
// string.
func serviceSetting(s, key string) (value, from string, ok bool) {
	name, ok := connStringSetting(s, "service")
	if !ok {
		name = os.Getenv("PGSERVICE")
	}
	if name == "" {
		return "", "", false
	}
	file, ok := connStringSetting(s, "servicefile")
	if !ok {
		file = os.Getenv("PGSERVICEFILE")
	}
	if file == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			return "", "", false
		}
		file = filepath.Join(home, ".pg_service.conf")
	}
	sf, err := pgservicefile.ReadServicefile(file)
	if err != nil {
		return "", "", false
	}
	service, err := sf.GetService(name)
	if err != nil {
		return "", "", false
	}
	value, ok = service.Settings[key]
	return value, fmt.Sprintf("service %q in %s", name, file), ok
}

// sessionTimeout is the statement_timeout fleetctl's sessions run with:
// its value as written (the flag's in milliseconds, as Postgres reads a
// number without a unit, sent as a parameter; or the connection string's,
// a parameter or -c in its options, as written there),
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
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && (pgErr.Code == pgInvalidParameterValue || pgErr.Code == pgUndefinedObject) {
		// A setting the connection string (or a PG* variable) makes
		// and the server refuses as it starts the session.
		return &exitError{
			code:   ExitUsage,
			global: true,
			hint:   globalHint,
			err: fmt.Errorf("the server at %s refuses a setting of the connection (its string, its options or a PG* variable): %s",
				endpoint(cfg.ConnConfig.Host, cfg.ConnConfig.Port), pgErr.Message),
		}
	}
	return &exitError{
		code:   ExitFailure,
		global: true,
		err:    fmt.Errorf("cannot connect to %s: %s", endpoints(cfg), connectCause(err, timeout)),
	}
}

// The SQLSTATEs of a session setting the server refuses: a value out of
// range or unread, and a setting it does not know.
const (
	pgInvalidParameterValue = "22023"
	pgUndefinedObject       = "42704"
)

// endpoints names the servers cfg tries, in order: its host and its
// fallbacks' (a multi-host connection string), each once.
func endpoints(cfg *pgxpool.Config) string {
	names := []string{endpoint(cfg.ConnConfig.Host, cfg.ConnConfig.Port)}
	for _, f := range cfg.ConnConfig.Fallbacks {
		if e := endpoint(f.Host, f.Port); !slices.Contains(names, e) {
			names = append(names, e)
		}
	}
	return strings.Join(names, " or ")
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
		return fmt.Sprintf("timed out after %s", writtenDuration(timeout))
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

// pgTimeout returns the statement_timeout the server applies for the
// setting v, as Postgres (12 and later) reads an integer setting in
// milliseconds: leading and trailing white space; a C integer (0x… hex,
// 0… octal), or a decimal number with a fraction or an exponent; an
// optional unit (us, ms, s, min, h, d, as written), white space allowed
// before it. A fraction of a unit is first rounded to the next smaller
// unit, then the whole to milliseconds, half to even (so 400us, 0.4 and
// 2500us are 0, 0 and 2ms). It reports false for a value the server
// refuses (a negative one, one past INT_MAX milliseconds, an unknown
// unit) and for the rare forms it does not read (a hexadecimal fraction).
func pgTimeout(v string) (time.Duration, bool) {
	num, rest, ok := cNumber(v)
	if !ok {
		return 0, false
	}
	if unit := strings.Trim(rest, cSpace); unit != "" {
		i := slices.IndexFunc(pgTimeUnits, func(u pgTimeUnit) bool { return u.name == unit })
		if i < 0 {
			return 0, false
		}
		num *= pgTimeUnits[i].ms
		if i+1 < len(pgTimeUnits) {
			next := pgTimeUnits[i+1].ms
			num = math.RoundToEven(num/next) * next
		}
	}
	num = math.RoundToEven(num)
	if !(num >= 0 && num <= math.MaxInt32) {
		return 0, false
	}
	return time.Duration(num) * time.Millisecond, true
}

// cSpace is the white space of C's isspace.
const cSpace = " \t\n\v\f\r"

// pgTimeUnit is one unit of a Postgres time setting in milliseconds.
type pgTimeUnit struct {
	name string
	ms   float64
}

// pgTimeUnits are the units of a setting in milliseconds, largest first,
// as Postgres's table orders them (each one's next is the next smaller).
var pgTimeUnits = []pgTimeUnit{{"d", 86400000}, {"h", 3600000}, {"min", 60000}, {"s", 1000}, {"ms", 1}, {"us", 0.001}}

// cNumber reads the number at the start of v as strtol with base 0 does
// (white space before it skipped), or, when a '.', an 'e' or an 'E'
// follows the integer or it overflows, as strtod does (decimal forms
// only), and returns it with the rest of v. Where strtol converts nothing
// its end is v itself, so only a v that starts with one of those three
// goes on to strtod (" .5" and "+.5" are no number, ".5" is).
func cNumber(v string) (float64, string, bool) {
	s := strings.TrimLeft(v, cSpace)
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	base, start := 10, i
	switch {
	case len(s) > i+2 && s[i] == '0' && (s[i+1] == 'x' || s[i+1] == 'X') && isDigit(s[i+2], 16):
		base, start = 16, i+2
	case i < len(s) && s[i] == '0':
		base = 8
	}
	end := start
	for end < len(s) && isDigit(s[end], base) {
		end++
	}
	if end == start {
		if v != "" && strings.IndexByte(".eE", v[0]) >= 0 {
			return cDecimal(v)
		}
		return 0, "", false
	}
	n, err := strconv.ParseInt(s[start:end], base, 64)
	if end < len(s) && strings.IndexByte(".eE", s[end]) >= 0 || errors.Is(err, strconv.ErrRange) {
		if base == 16 {
			return 0, "", false
		}
		return cDecimal(s)
	}
	if err != nil {
		return 0, "", false
	}
	if s[0] == '-' {
		n = -n
	}
	return float64(n), s[end:], true
}

// cDecimal reads the decimal number at the start of s, with an optional
// sign, fraction and exponent, and returns it with the rest of s.
func cDecimal(s string) (float64, string, bool) {
	digits := func(i int) int {
		for i < len(s) && isDigit(s[i], 10) {
			i++
		}
		return i
	}
	i := 0
	if i < len(s) && (s[i] == '+' || s[i] == '-') {
		i++
	}
	end := digits(i)
	mantissa := end > i
	if end < len(s) && s[end] == '.' {
		frac := digits(end + 1)
		mantissa = mantissa || frac > end+1
		end = frac
	}
	if !mantissa {
		return 0, "", false
	}
	if end < len(s) && (s[end] == 'e' || s[end] == 'E') {
		j := end + 1
		if j < len(s) && (s[j] == '+' || s[j] == '-') {
			j++
		}
		if k := digits(j); k > j {
			end = k
		}
	}
	f, err := strconv.ParseFloat(s[:end], 64)
	if err != nil {
		return 0, "", false // out of range too, as strtod's ERANGE is
	}
	if f != 0 && math.Abs(f) < 0x1p-1022 || f == 0 && strings.ContainsAny(strings.SplitN(strings.ToLower(s[:end]), "e", 2)[0], "123456789") {
		return 0, "", false // strtod's ERANGE for a result below the normal range
	}
	return f, s[end:], true
}

// isDigit reports whether c is a digit in base 8, 10 or 16.
func isDigit(c byte, base int) bool {
	switch {
	case c >= '0' && c <= '7':
		return true
	case c == '8' || c == '9':
		return base >= 10
	}
	c |= 0x20
	return base == 16 && c >= 'a' && c <= 'f'
}

// optionsSetting returns the value the startup options opts (a connection
// string's options, or $PGOPTIONS) give the setting name, as the server
// reads them: words split at white space, a backslash taking the next
// character as it is; switches as getopt reads them (see pgSwitches), so
// -c name=value, -cname=value, -ec name=value or --name=value, the name
// in any case and a dash in it read as an underscore; the last one given
// wins.
func optionsSetting(opts, name string) (string, bool) {
	var words []string
	var word strings.Builder
	inWord, escaped := false, false
	for i := 0; i < len(opts); i++ {
		switch c := opts[i]; {
		case escaped:
			word.WriteByte(c)
			escaped = false
		case c == '\\':
			inWord, escaped = true, true
		case strings.IndexByte(cSpace, c) >= 0:
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		default:
			word.WriteByte(c)
			inWord = true
		}
	}
	if inWord {
		words = append(words, word.String())
	}
	value, found := "", false
	for i := 0; i < len(words); i++ {
		w := words[i]
		if len(w) < 2 || w[0] != '-' {
			continue
		}
		// The word's switches, as getopt reads them: one that takes an
		// argument takes the rest of the word, or the next word.
		for j := 1; j < len(w); j++ {
			k := strings.IndexByte(pgSwitches, w[j])
			if k < 0 || w[j] == ':' {
				break // the server refuses it
			}
			if k+1 == len(pgSwitches) || pgSwitches[k+1] != ':' {
				continue
			}
			arg := w[j+1:]
			if arg == "" && i+1 < len(words) {
				i++
				arg = words[i]
			}
			if c := w[j]; c == 'c' || c == '-' {
				if k, v, ok := strings.Cut(arg, "="); ok && strings.EqualFold(strings.ReplaceAll(k, "-", "_"), name) {
					value, found = v, true
				}
			}
			break
		}
	}
	return value, found
}

// pgSwitches are the server's switches, as getopt takes them (a colon
// after one that takes an argument): -c name=value and --name=value set a
// setting.
const pgSwitches = "B:bc:C:D:d:EeFf:h:ijk:lN:nOPp:r:S:sTt:v:W:-:"
