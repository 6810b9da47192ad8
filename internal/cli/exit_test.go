package cli

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestTimeoutHint: a statement the server canceled names the
// statement_timeout in force and what set it: surely when Postgres says the
// timeout ended it (even if fleetctl's context ended too), as one of two
// causes when it speaks another language, and not at all when the session
// has none; not for a cancel request said in English, nor for a statement
// fleetctl's own context ended, nor for any other error. An error fleetctl
// built around the server's (drain --wait's failed check), wrapped or
// not, keeps its exit status and gets the hint inside, where exitCode
// prints from.
func TestTimeoutHint(t *testing.T) {
	t.Parallel()
	canceled := func(msg string) error {
		return fmt.Errorf("reading keys: %w", &pgconn.PgError{Severity: "ERROR", Code: sqlQueryCanceled, Message: msg})
	}
	set := sessionTimeout{value: "200", desc: "200ms, from --statement-timeout (0 for none)"}
	none := sessionTimeout{value: "0", desc: "0s, from --statement-timeout (0 for none)", none: true}
	sure := "(a statement ran past the session's statement_timeout: " + set.desc + ")"
	maybe := "(the server canceled a statement: it ran past the session's statement_timeout, " + set.desc +
		", or another session canceled it)"
	const french = "annulation de la requête à cause du délai d'attente des requêtes"
	const english = "canceling statement due to statement timeout"
	for _, c := range []struct {
		name    string
		err     func() error
		timeout sessionTimeout
		want    string // the printed message's suffix; "" for the error unchanged
	}{
		{"statement timeout", func() error { return canceled(english) }, set, sure},
		{"another language", func() error { return canceled(french) }, set, maybe},
		{"another language, no timeout", func() error { return canceled(french) }, none,
			"(the server canceled a statement, and the session has no statement_timeout: another session canceled it)"},
		{"timeout not known", func() error { return canceled(english) }, sessionTimeout{},
			"(a statement ran past the session's statement_timeout: --statement-timeout sets it; 0 for none)"},
		{"cancel request", func() error { return canceled("canceling statement due to user request") }, set, ""},
		{"own context", func() error { return fmt.Errorf("%w: %w", context.Canceled, canceled(french)) }, set, ""},
		{"own deadline", func() error { return fmt.Errorf("%w: %w", context.DeadlineExceeded, canceled(french)) }, set, ""},
		{"timeout under own deadline", func() error { return fmt.Errorf("%w: %w", context.DeadlineExceeded, canceled(english)) }, set, sure},
		{"other error", func() error {
			return fmt.Errorf("reading keys: %w", &pgconn.PgError{Code: "42501", Message: "permission denied for table keys"})
		}, set, ""},
		{"failed check", func() error { return checkFailedf("no read succeeded: %w", canceled(english)) }, set, sure},
		{"wrapped failed check", func() error {
			return fmt.Errorf("waiting: %w", checkFailedf("no read succeeded: %w", canceled(english)))
		}, set, sure},
	} {
		t.Run(c.name, func(t *testing.T) {
			err := c.err()
			var before bytes.Buffer
			code := exitCode(&before, inCommand("keys", err))
			got := timeoutHint(c.err(), c.timeout)
			var pgErr *pgconn.PgError
			require.ErrorAs(t, got, &pgErr, "the server's error stays in the chain")
			var said bytes.Buffer
			require.Equal(t, code, exitCode(&said, inCommand("keys", got)), "the exit status stays")
			if c.want == "" {
				require.Equal(t, before.String(), said.String())
				return
			}
			require.Equal(t, strings.TrimSuffix(before.String(), "\n")+" "+c.want+"\n", said.String())
		})
	}
}
