package cli

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	ucli "github.com/urfave/cli/v2"
	"golang.org/x/term"

	"github.com/fleetlimit/fleetlimit/coord"
	"github.com/fleetlimit/fleetlimit/internal/quote"
)

const appName = "fleetctl"

// Env is what a run of fleetctl takes from its process. The zero value of
// each field means the process's own.
type Env struct {
	// Stdout receives results and help; Stderr receives errors and
	// progress. Default to os.Stdout and os.Stderr.
	Stdout, Stderr io.Writer
	// Stdin answers confirmations (migrate reset). Defaults to os.Stdin.
	Stdin io.Reader
	// Getenv reads the environment (FLEET_DATABASE_URL, DATABASE_URL,
	// COLUMNS). Defaults to os.Getenv. libpq's PG* variables are read by pgx
	// from the process environment whatever Getenv is.
	Getenv func(string) string
	// IsTerminal reports whether w is a terminal, which selects watch's live
	// view. Defaults to a check that w is an *os.File on a character device.
	IsTerminal func(w io.Writer) bool
}

func (e Env) withDefaults() Env {
	if e.Stdout == nil {
		e.Stdout = os.Stdout
	}
	if e.Stderr == nil {
		e.Stderr = os.Stderr
	}
	if e.Stdin == nil {
		e.Stdin = os.Stdin
	}
	if e.Getenv == nil {
		e.Getenv = os.Getenv
	}
	if e.IsTerminal == nil {
		e.IsTerminal = func(w io.Writer) bool { return isTerminal(w) }
	}
	return e
}

// stdinIsTerminal reports whether the run's stdin is a terminal, where a
// person can answer a confirmation.
func (r *runner) stdinIsTerminal() bool {
	return isTerminal(r.env.Stdin)
}

// isTerminal reports whether w is an *os.File open on a terminal.
func isTerminal(w any) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

// Run runs fleetctl with args (args[0] is the program name) and returns its
// exit status (see the package doc). Errors are printed on env.Stderr. ctx
// ends long-running commands (watch, demo, drain --wait) early; main cancels
// it on SIGINT and SIGTERM. Run never calls os.Exit.
//
// Run is safe for concurrent use. Parsing the arguments is serialized,
// because urfave/cli v2 keeps its help flag in a package variable that
// every parse writes; commands run concurrently.
func Run(ctx context.Context, args []string, env Env) (code int) {
	parseMu.Lock()
	parsed := sync.OnceFunc(parseMu.Unlock)
	defer parsed()
	r := &runner{env: env.withDefaults(), parsed: parsed}
	r.out = &outWriter{w: r.env.Stdout}
	r.env.Stdout = r.out
	terminal := r.env.IsTerminal
	r.env.IsTerminal = func(w io.Writer) bool {
		if w == io.Writer(r.out) {
			w = r.out.w
		}
		return terminal(w)
	}
	defer func() {
		// An operator sees one line, never a stack trace, even for a bug.
		if p := recover(); p != nil {
			code = exitCode(r.env.Stderr, fmt.Errorf("internal error (please report it): %v", p))
		}
	}()
	app := r.app()
	n, err := normalizeArgs(app, args)
	if err == nil {
		r.args = n
		err = app.RunContext(ctx, n.args)
	}
	if err == nil && r.notFound != nil {
		err = r.notFound
	}
	if lost := r.out.failed(); err == nil && lost != nil {
		err = outputLost(lost) // help, say
	}
	return exitCode(r.env.Stderr, err)
}

// outWriter is stdout keeping its first write error, so that a run whose
// output was lost does not exit 0. Safe for concurrent use.
type outWriter struct {
	w   io.Writer
	mu  sync.Mutex
	err error
}

func (o *outWriter) Write(p []byte) (int, error) {
	n, err := o.w.Write(p)
	if err != nil {
		o.mu.Lock()
		if o.err == nil {
			o.err = err
		}
		o.mu.Unlock()
	}
	return n, err
}

// failed returns the first write error, or nil.
func (o *outWriter) failed() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.err
}

// outputLost is the error of a run whose output could not be written:
// whatever it changed stays changed.
func outputLost(err error) error {
	return fmt.Errorf("writing the output failed: %w (what the command changed before that stays changed)", err)
}

// parseMu serializes argument parsing; see Run.
var parseMu sync.Mutex

// runner holds one run's environment and what urfave/cli reports outside of
// returned errors.
type runner struct {
	env Env
	// parsed ends the run's parsing phase (see Run); actions call it first.
	parsed func()
	// notFound is set by CommandNotFound (help for an unknown command).
	notFound error
	// args is the normalized command line, which flag errors consult.
	args normalized
	// timeout is the statement_timeout of the command's sessions, set when
	// its pool is configured.
	timeout sessionTimeout
	// out is the run's stdout (env.Stdout), which keeps its first error.
	out *outWriter
}

// globalHelp is the app's description: the connection precedence and the
// exit statuses.
const globalHelp = `Inspect and operate a fleetlimit fleet through its Postgres coordinator.

The database is the first of: --database-url, $FLEET_DATABASE_URL,
$DATABASE_URL, then libpq's PG* variables (PGHOST, PGPORT, PGUSER,
PGPASSWORD, PGDATABASE, ...). Sessions set application_name=fleetctl and
statement_timeout (--statement-timeout).

Flags may follow arguments ("drain KEY NODE --wait"). Read commands take
--output table|json; JSON fields are snake_case and stable.

Exit status: 0 ok, 1 failure, 2 usage error, 3 check failed
(migrate validate found pending migrations, drain --wait timed out).`

// Flag names shared by several commands.
const (
	flagDatabaseURL      = "database-url"
	flagStatementTimeout = "statement-timeout"
	flagConnectTimeout   = "connect-timeout"
	flagOutput           = "output"
)

// Defaults of the connection flags.
const (
	DefaultStatementTimeout = 10 * time.Second
	DefaultConnectTimeout   = 5 * time.Second
)

func (r *runner) app() *ucli.App {
	app := &ucli.App{
		Name:                 appName,
		HelpName:             appName,
		Usage:                "operate a fleetlimit fleet",
		Description:          globalHelp,
		HideVersion:          true,
		Writer:               r.env.Stdout,
		ErrWriter:            r.env.Stderr,
		EnableBashCompletion: false,
		Flags: []ucli.Flag{
			&ucli.StringFlag{
				Name:  flagDatabaseURL,
				Usage: "Postgres URL or keyword/value string (else $FLEET_DATABASE_URL, $DATABASE_URL, then PG* variables)",
			},
			&ucli.DurationFlag{
				Name:  flagStatementTimeout,
				Value: DefaultStatementTimeout,
				Usage: "statement_timeout of every session; 0 disables (not given: the connection string's, or $PGOPTIONS', else this)",
			},
			&ucli.DurationFlag{
				Name:  flagConnectTimeout,
				Value: DefaultConnectTimeout,
				Usage: "how long to try to connect (not given: the connection string's connect_timeout, else its service's, else $PGCONNECT_TIMEOUT's, else this)",
			},
		},
		Commands: []*ucli.Command{
			r.migrateCommand(),
			r.keysCommand(),
			r.nodesCommand(),
			r.drainCommand(),
			r.undrainCommand(),
			r.evictCommand(),
			r.relearnCommand(),
			r.grantCommand(),
			r.revokeCommand(),
			r.limitsCommand(),
			r.watchCommand(),
			r.demoCommand(),
			r.versionCommand(),
		},
		Action: r.unknownCommand,
		CommandNotFound: func(c *ucli.Context, name string) {
			r.notFound = inCommand(commandPath(c), unknownCommandError(c, name))
		},
		OnUsageError:   r.onUsageError,
		ExitErrHandler: func(*ucli.Context, error) {}, // Run maps errors to exit statuses
	}
	setUsageErrorHandlers(app.Commands, r.onUsageError)
	hideHelpCommands(app.Commands)
	return app
}

// hideHelpCommands keeps urfave/cli from giving the commands that have no
// subcommands a "help" subcommand: their arguments are keys, nodes and
// roles, and "nodes help" lists the key called help. A command group
// keeps it ("keys help create"); --help works everywhere.
func hideHelpCommands(cmds []*ucli.Command) {
	for _, c := range cmds {
		c.HideHelpCommand = len(c.Subcommands) == 0
		hideHelpCommands(c.Subcommands)
	}
}

// setUsageErrorHandlers makes every command report flag errors as usage
// errors instead of printing help.
func setUsageErrorHandlers(cmds []*ucli.Command, fn ucli.OnUsageErrorFunc) {
	for _, c := range cmds {
		c.OnUsageError = fn
		setUsageErrorHandlers(c.Subcommands, fn)
	}
}

// onUsageError reports a flag the parser rejected as a usage error of the
// command that was run, whichever level of the command line the parser
// was reading: a global flag's too, which it reads before it reaches the
// command, so that "keys --statement-timeout=" is a "keys:" error like
// every other flag error of keys. The command is the innermost of the one
// named on the command line and the one being parsed (urfave/cli runs
// "migrate -- status" as migrate status).
func (r *runner) onUsageError(c *ucli.Context, err error, _ bool) error {
	command := r.args.command
	if p := commandPath(c); len(p) > len(command) {
		command = p
	}
	flag, msg := r.flagError(c, err)
	if swallowed := swallowedCommand(c.App, r.args.args); swallowed != "" {
		msg = fmt.Errorf("%w%s", msg, swallowed)
	}
	ee := &exitError{code: ExitUsage, err: msg}
	if flag != "" && findFlag(c.App.Flags, flag) != nil && (r.args.cmd == nil || findFlag(r.args.cmd.Flags, flag) == nil) {
		ee.hint = globalHint // the command's help does not list it
	}
	return inCommand(command, ee)
}

// Go's flag package's errors, which urfave/cli passes on. A flag is named
// with one dash, however it was written; a value is quoted with %q.
var (
	goFlagUndefined = regexp.MustCompile(`^flag provided but not defined: -(.+)$`)
	goFlagNoValue   = regexp.MustCompile(`^flag needs an argument: -(.+)$`)
	goFlagBadValue  = regexp.MustCompile(`^invalid (boolean )?value ("(?:[^"\\]|\\.)*") for (?:flag )?-([^:]+): (.*)$`)
	// durationSyntax matches what time.ParseDuration reads, whatever the
	// size: a value it refuses that matches is too large.
	durationSyntax = regexp.MustCompile(`^[-+]?(?:(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:ns|us|µs|μs|ms|s|m|h))+$|^[-+]?0$`)
)

// flagError rewrites an error of Go's flag package into fleetctl's terms.
// A defined flag is named by its name with two dashes, however it was
// written ("-h=maybe" is "--help"), as fleetctl's own checks name it; an
// unknown flag is named as it was typed ("-x", "--x"), since it has no
// other name. A duration or boolean that does not parse says what was
// wanted rather than "parse error" (integer flags are decimalFlags, which
// say it themselves). A flag of the command's written before the
// command's name, where the parser finds no such flag, is reported as
// misplaced. flag names the defined flag whose value was missing or bad,
// as the parser wrote it; "" for any other error.
func (r *runner) flagError(c *ucli.Context, err error) (flag string, _ error) {
	msg := err.Error()
	var flags []ucli.Flag
	if c.Command != nil {
		flags = c.Command.Flags
	}
	flags = slices.Concat(flags, c.App.Flags)
	canonical := func(name string) string {
		if f := findFlag(flags, name); f != nil {
			return "--" + f.Names()[0]
		}
		return "--" + name
	}
	if m := goFlagUndefined.FindStringSubmatch(msg); m != nil {
		typed := r.args.typed(m[1])
		if commandPath(c) != r.args.command && r.args.cmd != nil && findFlag(r.args.cmd.Flags, m[1]) != nil {
			return "", fmt.Errorf("flag %s must come after %q, the command it belongs to", typed, r.args.command)
		}
		if owner := groupOwning(c.App, r.args.command, m[1]); owner != "" {
			return "", fmt.Errorf("flag %s belongs to %q, not to %q", typed, owner, r.args.command)
		}
		return "", fmt.Errorf("flag provided but not defined: %s", typed)
	}
	if m := goFlagNoValue.FindStringSubmatch(msg); m != nil {
		return m[1], fmt.Errorf("flag needs an argument: %s", canonical(m[1]))
	}
	m := goFlagBadValue.FindStringSubmatch(msg)
	if m == nil {
		return "", err
	}
	boolean, value, name, cause := m[1] != "", m[2], m[3], m[4]
	if cause == "parse error" {
		switch findFlag(flags, name).(type) {
		case *ucli.DurationFlag:
			cause = "want a duration such as 500ms, 30s or 1m30s"
			if uq, err := strconv.Unquote(value); err == nil && durationSyntax.MatchString(uq) {
				cause = "out of range: want at most " + time.Duration(math.MaxInt64).String()
				if strings.HasPrefix(uq, "-") {
					cause = "out of range: want at least " + time.Duration(math.MinInt64).String()
				}
				switch name {
				case flagStatementTimeout:
					cause = "out of range: " + statementTimeoutWant
				case flagConnectTimeout:
					if strings.HasPrefix(uq, "-") {
						cause = "out of range: want > 0"
					}
				}
			}
		case *ucli.BoolFlag:
			cause = "want true or false"
		}
	}
	if boolean {
		return name, fmt.Errorf("invalid boolean value %s for %s: %s", value, canonical(name), cause)
	}
	return name, fmt.Errorf("invalid value %s for %s: %s", value, canonical(name), cause)
}

// unknownCommand is the action of the app and of every command group: with
// no argument it prints help and fails as a usage error; otherwise the first
// argument names no command.
// Help is printed before parsing is declared over: it reads the shared
// help flag.
func (r *runner) unknownCommand(c *ucli.Context) error {
	defer r.parsed()
	swallowed := swallowedCommand(c.App, r.args.args)
	if !c.Args().Present() {
		if c.Command != nil && c.Command.Name != "" && c.Command.Name != appName {
			_ = ucli.ShowSubcommandHelp(c)
		} else {
			_ = ucli.ShowAppHelp(c)
		}
		return inCommand(commandPath(c), usageErrorf("missing command%s", swallowed))
	}
	err := unknownCommandError(c, c.Args().First())
	if swallowed != "" {
		err = usageErrorf("unknown command %q%s", c.Args().First(), swallowed)
	}
	return inCommand(commandPath(c), err)
}

// swallowedCommand says, for an error's end, that --database-url took a
// command's name for its value (an unset variable after the flag: the
// command line's next word was the command), or returns "" when args
// (the command line after the program's name) show no such thing.
func swallowedCommand(app *ucli.App, args []string) string {
	for i := 0; i+1 < len(args); i++ {
		if a := args[i]; a == "--" {
			break
		} else if a != "--"+flagDatabaseURL && a != "-"+flagDatabaseURL {
			continue
		}
		if v := args[i+1]; slices.ContainsFunc(app.Commands, func(cmd *ucli.Command) bool { return cmd.HasName(v) }) {
			return fmt.Sprintf(" (--%s took the command %q as its value: an unset variable after the flag? "+
				"give the flag a connection string, or leave it out)", flagDatabaseURL, v)
		}
		i++
	}
	return ""
}

// unknownCommandError names the unknown command and suggests the closest
// one of c's commands, if any is within two edits.
func unknownCommandError(c *ucli.Context, name string) error {
	var cmds []*ucli.Command
	if c.Command != nil && len(c.Command.Subcommands) > 0 {
		cmds = c.Command.Subcommands
	} else {
		cmds = c.App.Commands
	}
	best, bestDist := "", 3
	for _, cmd := range cmds {
		if d := editDistance(strings.ToLower(name), cmd.Name); d < bestDist {
			best, bestDist = cmd.Name, d
		}
	}
	if best == "" {
		return usageErrorf("unknown command %q", name)
	}
	return usageErrorf("unknown command %q; did you mean %q?", name, best)
}

// editDistance is the Levenshtein distance between a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}

// commandPath returns the path of c's command below fleetctl ("limits set"),
// or "" for the app itself.
func commandPath(c *ucli.Context) string {
	if c == nil || c.Command == nil {
		return ""
	}
	name := c.Command.HelpName
	if name == "" {
		name = c.Command.Name
	}
	name = strings.TrimPrefix(name, appName)
	return strings.TrimSpace(name)
}

// action wraps a command's action: parsing is over when it runs, and its
// errors name the command.
func (r *runner) action(fn func(c *ucli.Context) error) ucli.ActionFunc {
	return func(c *ucli.Context) error {
		r.parsed()
		err := fn(c)
		if lost := r.out.failed(); lost != nil && (err == nil || err == lost) {
			// The command's own error, if any, was the write's; one
			// that says more (joined with others) stands as it is.
			err = outputLost(lost)
		}
		return inCommand(commandPath(c), timeoutHint(err, r.timeout))
	}
}

// wantArgs checks that c has exactly the named positional arguments and
// returns them.
func wantArgs(c *ucli.Context, names ...string) ([]string, error) {
	args := c.Args().Slice()
	if len(args) < len(names) {
		return nil, usageErrorf("missing argument %s", strings.Join(names[len(args):], " "))
	}
	if len(args) > len(names) {
		return nil, usageErrorf("unexpected argument %q", args[len(names)])
	}
	for i, a := range args {
		if a == "" {
			return nil, usageErrorf("empty argument %s", names[i])
		}
		if (names[i] == "KEY" || names[i] == "NODE") && !coord.ValidName(a) {
			return nil, usageErrorf("invalid %s %s (%s): want 1..%d bytes of UTF-8 without NUL",
				names[i], quote.Short(a), plural(len(a), "byte", "bytes"), coord.MaxNameBytes)
		}
	}
	return args, nil
}

// argsUsage formats the positional arguments for help.
func argsUsage(names ...string) string { return strings.Join(names, " ") }

func (r *runner) printf(format string, args ...any) {
	fmt.Fprintf(r.env.Stdout, format, args...)
}
