package cli

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestTimeoutHint: a statement the server canceled names the
// statement_timeout in force and what set it: surely when Postgres says the
// timeout ended it (even if fleetctl's context ended too), as one of two
// causes when it speaks another language; not for a cancel request said in
// English, nor for a statement fleetctl's own context ended, nor for any
// other error. An error fleetctl built around the server's (drain --wait's
// failed check) keeps its exit status and gets the hint inside.
func TestTimeoutHint(t *testing.T) {
	t.Parallel()
	canceled := func(msg string) error {
		return fmt.Errorf("reading keys: %w", &pgconn.PgError{Severity: "ERROR", Code: sqlQueryCanceled, Message: msg})
	}
	const setting = "200ms, from --statement-timeout (0 for none)"
	sure := "(a statement ran past the session's statement_timeout: " + setting + ")"
	maybe := "(the server canceled a statement: it ran past the session's statement_timeout, " + setting +
		", or another session canceled it)"
	const french = "annulation de la requête à cause du délai d'attente des requêtes"
	for _, c := range []struct {
		name string
		err  error
		want string // the suffix; "" for the error unchanged
	}{
		{"statement timeout", canceled("canceling statement due to statement timeout"), sure},
		{"another language", canceled(french), maybe},
		{"cancel request", canceled("canceling statement due to user request"), ""},
		{"own context", fmt.Errorf("%w: %w", context.Canceled, canceled(french)), ""},
		{"own deadline", fmt.Errorf("%w: %w", context.DeadlineExceeded, canceled(french)), ""},
		{"timeout under own deadline", fmt.Errorf("%w: %w", context.DeadlineExceeded, canceled("canceling statement due to statement timeout")), sure},
		{"other error", fmt.Errorf("reading keys: %w", &pgconn.PgError{Code: "42501", Message: "permission denied for table keys"}), ""},
		{"failed check", checkFailedf("no read succeeded: %w", canceled("canceling statement due to statement timeout")), sure},
	} {
		t.Run(c.name, func(t *testing.T) {
			asked := false
			got := timeoutHint(c.err, func() string { asked = true; return setting })
			var pgErr *pgconn.PgError
			require.ErrorAs(t, c.err, &pgErr)
			require.ErrorIs(t, got, pgErr, "the server's error stays in the chain")
			require.Equal(t, c.want != "", asked, "the setting is read only for a hint")
			if c.want == "" {
				require.Equal(t, c.err.Error(), got.Error())
				return
			}
			require.Equal(t, c.err.Error()+" "+c.want, got.Error())
			var before, after *exitError
			if errors.As(c.err, &before) {
				require.ErrorAs(t, got, &after)
				require.Equal(t, before.code, after.code)
				require.Equal(t, c.err.Error(), before.Error(), "the error given stays as it was")
			}
		})
	}
}

// TestStatementTimeoutSource: the hint names the statement_timeout the
// sessions run with and what set it: the flag when given, else the
// connection string's own, else the flag's default.
func TestStatementTimeoutSource(t *testing.T) {
	t.Parallel()
	const url = "postgres://u@127.0.0.1:5432/db"
	for _, c := range []struct {
		name string
		s    connSettings
		want string
	}{
		{"default", connSettings{url: url, statementTimeout: DefaultStatementTimeout}, "10s, fleetctl's default (--statement-timeout sets it; 0 for none)"},
		{"flag", connSettings{url: url, statementTimeout: 200 * time.Millisecond, statementTimeoutSet: true}, "200ms, from --statement-timeout (0 for none)"},
		{"connection string", connSettings{url: url + "?statement_timeout=1500", statementTimeout: DefaultStatementTimeout}, "1500, from the connection string (--statement-timeout overrides it; 0 for none)"},
		{"flag over connection string", connSettings{url: url + "?statement_timeout=1500", statementTimeout: 0, statementTimeoutSet: true}, "0s, from --statement-timeout (0 for none)"},
	} {
		t.Run(c.name, func(t *testing.T) {
			require.Equal(t, c.want, c.s.statementTimeoutSource())
			cfg, err := poolConfig(c.s)
			require.NoError(t, err)
			value, _ := c.s.statementTimeoutIn(cfg.ConnConfig.RuntimeParams)
			require.Equal(t, value, cfg.ConnConfig.RuntimeParams["statement_timeout"], "the session runs with the value named")
		})
	}
}
