package migrations

import (
	"errors"
	"io/fs"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5/pgconn"
	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"
)

// A failed migration is said to have changed nothing when the database
// refused it, with what the run did before it, instead of goose's
// "partial migration error"; any other failure leaves it unknown, and
// says where to look. The cause stays wrapped.
func TestFailedMigrationSaysWhatWasDone(t *testing.T) {
	t.Parallel()
	refused := &pgconn.PgError{Severity: "ERROR", Code: "42501", Message: "permission denied for schema fleetlimit"}
	lost := errors.New("unexpected EOF")
	result := func(v int64) *goose.MigrationResult {
		return &goose.MigrationResult{Source: &goose.Source{Type: goose.TypeSQL, Version: v}}
	}
	for _, tc := range []struct {
		applied []*goose.MigrationResult
		failed  int64
		up      bool
		cause   error
		want    string
	}{
		{nil, 11, false, refused, "rolling back 00011 failed and changed nothing; nothing was rolled back: " + refused.Error()},
		{[]*goose.MigrationResult{result(11), result(10)}, 9, false, refused,
			"rolling back 00009 failed and changed nothing; 2 migrations were rolled back before it (00011 to 00010): " + refused.Error()},
		{[]*goose.MigrationResult{result(8)}, 9, true, refused,
			"applying 00009 failed and changed nothing; migration 00008 was applied before it: " + refused.Error()},
		{[]*goose.MigrationResult{result(7), result(8), result(9)}, 10, true, lost,
			"applying 00010 failed, and whether it was applied is unknown (see 'fleetctl migrate status'); " +
				"3 migrations were applied before it (00007 to 00009): unexpected EOF"},
	} {
		err := failedMigration(&goose.PartialError{Applied: tc.applied, Failed: result(tc.failed), Err: tc.cause}, tc.up)
		require.EqualError(t, err, tc.want)
		require.ErrorIs(t, err, tc.cause)
	}
	require.Nil(t, failedMigration(nil, true))
	require.Equal(t, lost, failedMigration(lost, true), "other errors pass unchanged")
}

// TestEveryMigrationIsOneTransaction: failedMigration says that a
// migration the database refused changed nothing, which holds because
// goose runs each in one transaction unless it opts out.
func TestEveryMigrationIsOneTransaction(t *testing.T) {
	t.Parallel()
	files, err := fs.Glob(FS(), "*.sql")
	require.NoError(t, err)
	require.NotEmpty(t, files)
	for _, f := range files {
		b, err := fs.ReadFile(FS(), f)
		require.NoError(t, err)
		require.NotContains(t, strings.ToUpper(string(b)), "+GOOSE NO TRANSACTION", f)
	}
}

// TestGapRowsKeepTheIdOrder: the rows that put back deleted versions
// take ids between their neighbours', a run of them one after another,
// or none when there is no room: goose rolls back in the order of the
// ids.
func TestGapRowsKeepTheIdOrder(t *testing.T) {
	t.Parallel()
	// Versions 0..6 at ids 1..7 with versions 3 and 4 deleted (ids 4
	// and 5 free), and version 6 at id 9.
	table := []versionRow{{1, 0}, {2, 1}, {3, 2}, {6, 5}, {9, 6}}
	values, ok := gapRows([]int64{3, 4}, table)
	require.True(t, ok)
	require.Equal(t, []string{"(4, 3, true)", "(5, 4, true)"}, values)

	table[3].id = 5 // version 5 took id 5: room for one row only
	_, ok = gapRows([]int64{3, 4}, table)
	require.False(t, ok)
	values, ok = gapRows([]int64{3}, table)
	require.True(t, ok)
	require.Equal(t, []string{"(4, 3, true)"}, values)

	// Versions 0 and 1 deleted: version 1 goes back at the first id.
	values, ok = gapRows([]int64{1}, []versionRow{{3, 2}, {4, 3}})
	require.True(t, ok)
	require.Equal(t, []string{"(1, 1, true)"}, values)
	// A newer version's row at a lower id bounds the room too.
	_, ok = gapRows([]int64{3}, []versionRow{{1, 0}, {2, 2}, {3, 4}, {4, 5}, {0, 6}})
	require.False(t, ok)
}
