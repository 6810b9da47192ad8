package cli

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/jackc/pgx/v5/pgconn"

	"github.com/fleetlimit/fleetlimit/coord"
)

// The exit statuses of fleetctl; see the package doc.
const (
	ExitOK          = 0
	ExitFailure     = 1
	ExitUsage       = 2
	ExitCheckFailed = 3
)

// exitError carries an exit status and, optionally, the command it came
// from ("nodes", "limits set"), which prefixes the message.
type exitError struct {
	code    int
	command string
	// global marks an error that is not about the command (the database is
	// unreachable): it is printed without the command's name.
	global bool
	err    error
	// hint is printed on a second line for usage errors ("Run ... --help").
	hint string
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageErrorf returns a usage error (exit status 2).
func usageErrorf(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...)}
}

// globalUsageErrorf returns a usage error about a global flag (or the
// environment variable standing in for one): its hint points to the app's
// help, which lists them, rather than the command's.
func globalUsageErrorf(format string, args ...any) error {
	return &exitError{code: ExitUsage, err: fmt.Errorf(format, args...), hint: globalHint}
}

// globalHint is the hint of a usage error about a global flag: the app's
// help lists the global flags, a command's does not.
var globalHint = fmt.Sprintf("Run '%s --help' for usage.", appName)

// checkFailedf returns a failed check (exit status 3).
func checkFailedf(format string, args ...any) error {
	return &exitError{code: ExitCheckFailed, err: fmt.Errorf(format, args...)}
}

// inCommand attributes err to command (its path below fleetctl, "limits
// set"), unless it already names one.
func inCommand(command string, err error) error {
	if err == nil {
		return nil
	}
	var ee *exitError
	if errors.As(err, &ee) {
		if ee.command == "" {
			ee.command = command
		}
		if ee.code == ExitUsage && ee.hint == "" {
			ee.hint = fmt.Sprintf("Run '%s --help' for usage.", strings.TrimSpace(appName+" "+command))
		}
		return ee
	}
	return &exitError{code: ExitFailure, command: command, err: err}
}

// timeoutHint says which setting ended a statement that ran past the
// session's statement_timeout, t (see poolConfig): Postgres names only the
// setting. An error fleetctl built around the server's (an exitError,
// wrapped or not) gets the hint inside it, where exitCode prints from. The
// message's English text tells a timeout from a cancel request. A server
// with other lc_messages says neither in English; a statement it canceled
// while fleetctl's own context still ran (an interrupt or a deadline of
// fleetctl's ends that context, and the error then wraps it) ran past the
// statement_timeout or, when the session has none, was canceled by
// another session, and the hint says so.
func timeoutHint(err error, t sessionTimeout) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != sqlQueryCanceled {
		return err
	}
	var ee *exitError
	if errors.As(err, &ee) {
		ee.err = timeoutHint(ee.err, t)
		return err
	}
	desc := t.desc
	if desc == "" {
		desc = fmt.Sprintf("--%s sets it; 0 for none", flagStatementTimeout)
	}
	switch {
	case strings.Contains(pgErr.Message, "statement timeout"):
		return fmt.Errorf("%w (a statement ran past the session's statement_timeout: %s)", err, desc)
	case strings.Contains(pgErr.Message, "user request"),
		errors.Is(err, context.Canceled), errors.Is(err, context.DeadlineExceeded):
		return err // another session's cancel request, or fleetctl's own
	case t.none:
		return fmt.Errorf("%w (the server canceled a statement, and the session has no statement_timeout: "+
			"another session canceled it)", err)
	default:
		return fmt.Errorf("%w (the server canceled a statement: it ran past the session's statement_timeout, "+
			"%s, or another session canceled it)", err, desc)
	}
}

// sqlQueryCanceled is the SQLSTATE of a statement canceled by a timeout or
// a cancel request.
const sqlQueryCanceled = "57014"

// exitCode prints err (if any) on stderr and returns the exit status for it.
// The message is one line (newlines inside it are folded), "fleetctl: " and
// the command that failed first; a usage error gets a second line with a
// hint.
func exitCode(stderr io.Writer, err error) int {
	if err == nil {
		return ExitOK
	}
	ee := &exitError{code: ExitFailure, err: err}
	errors.As(err, &ee)
	switch {
	case errors.Is(err, context.Canceled) && errors.Is(err, coord.ErrOutcomeUnknown):
		ee = &exitError{code: ee.code, command: ee.command, err: errors.New("interrupted while its statement still ran: " +
			"its change may yet be made; look with 'fleetctl keys' or 'fleetctl nodes KEY' before running it again")}
	case errors.Is(err, context.Canceled):
		ee = &exitError{code: ee.code, command: ee.command, err: errors.New("interrupted")}
	}
	prefix := appName + ": "
	if ee.command != "" && !ee.global {
		prefix += ee.command + ": "
	}
	msg := strings.ReplaceAll(strings.TrimSpace(ee.err.Error()), "\n", " ")
	fmt.Fprintf(stderr, "%s%s\n", prefix, msg)
	if ee.hint != "" {
		fmt.Fprintln(stderr, ee.hint)
	}
	return ee.code
}
