package cli

import (
	"context"
	"fmt"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/stretchr/testify/require"
)

// TestTimeoutHint: a statement the server canceled names
// --statement-timeout: surely when Postgres says the timeout ended it
// (even if fleetctl's context ended too), as one of two causes when it
// speaks another language; not for a cancel request said in English, nor
// for a statement fleetctl's own context ended, nor for any other error.
func TestTimeoutHint(t *testing.T) {
	t.Parallel()
	canceled := func(msg string) error {
		return fmt.Errorf("reading keys: %w", &pgconn.PgError{Severity: "ERROR", Code: sqlQueryCanceled, Message: msg})
	}
	sure := fmt.Sprintf("(a statement ran past the session's statement_timeout: --statement-timeout, %v by default; 0 for none)", DefaultStatementTimeout)
	maybe := fmt.Sprintf("(the server canceled a statement: it ran past the session's statement_timeout "+
		"(--statement-timeout, %v by default; 0 for none), or another session canceled it)", DefaultStatementTimeout)
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
	} {
		t.Run(c.name, func(t *testing.T) {
			got := timeoutHint(c.err)
			require.ErrorIs(t, got, c.err)
			if c.want == "" {
				require.Equal(t, c.err.Error(), got.Error())
				return
			}
			require.Equal(t, c.err.Error()+" "+c.want, got.Error())
		})
	}
}
