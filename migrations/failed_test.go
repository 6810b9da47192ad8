package migrations

import (
	"errors"
	"testing"

	"github.com/pressly/goose/v3"
	"github.com/stretchr/testify/require"
)

// A failed migration is said to have changed nothing, with what the run
// did before it, instead of goose's "partial migration error"; the cause
// stays wrapped.
func TestFailedMigrationSaysWhatWasDone(t *testing.T) {
	t.Parallel()
	cause := errors.New("permission denied")
	result := func(v int64) *goose.MigrationResult {
		return &goose.MigrationResult{Source: &goose.Source{Type: goose.TypeSQL, Version: v}}
	}
	for _, tc := range []struct {
		applied []*goose.MigrationResult
		done    string
		want    string
	}{
		{nil, "rolled back", "rolling back 00010 failed and changed nothing; nothing was rolled back: permission denied"},
		{[]*goose.MigrationResult{result(8)}, "applied", "applying 00010 failed and changed nothing; migration 00008 was applied before it: permission denied"},
		{[]*goose.MigrationResult{result(7), result(8), result(9)}, "applied",
			"applying 00010 failed and changed nothing; 3 migrations were applied before it (00007 to 00009): permission denied"},
	} {
		err := failedMigration(&goose.PartialError{Applied: tc.applied, Failed: result(10), Err: cause}, tc.done)
		require.EqualError(t, err, tc.want)
		require.ErrorIs(t, err, cause)
	}
	require.Nil(t, failedMigration(nil, "applied"))
	require.Equal(t, cause, failedMigration(cause, "applied"), "other errors pass unchanged")
}
