package coord

import (
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgconn"
)

// The SQLSTATEs raised by the fleetlimit.* functions.
const (
	sqlstateInvalidReport   = "FL001"
	sqlstateNodeIDInUse     = "FL002"
	sqlstateUnknownKey      = "FL003"
	sqlstateUnknownNode     = "FL004"
	sqlstateInvalidOverride = "FL005"
	sqlstateKeyExists       = "FL006"
	sqlstateLiveNodes       = "FL007"
	sqlstateHeldCapacity    = "FL008"
	sqlstateLearning        = "FL009"
)

// sqlstateQueryCanceled is Postgres's query_canceled: a statement stopped
// by a cancel request (see Postgres.queryRow).
const sqlstateQueryCanceled = "57014"

// pgError wraps err from operation op as "coord: op: ...", translating the
// functions' SQLSTATEs into the package's sentinels. Values Postgres cannot
// store as text (a NUL byte, invalid UTF-8) count as an invalid report.
func pgError(op string, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return fmt.Errorf("coord: %s: %w", op, err)
	}
	var sentinel error
	switch pgErr.Code {
	case sqlstateInvalidReport, "22021", "22P05", "22003", "23514":
		sentinel = ErrInvalidReport
	case sqlstateNodeIDInUse:
		sentinel = ErrNodeIDInUse
	case sqlstateUnknownKey:
		sentinel = ErrUnknownKey
	case sqlstateUnknownNode:
		sentinel = ErrUnknownNode
	case sqlstateInvalidOverride:
		sentinel = ErrInvalidOverride
	case sqlstateKeyExists:
		sentinel = ErrKeyExists
	case sqlstateLiveNodes:
		sentinel = ErrLiveNodes
	case sqlstateHeldCapacity:
		sentinel = ErrHeldCapacity
	case sqlstateLearning:
		sentinel = ErrLearning
	case "42883", "3F000", "42P01", "42703": // undefined function, schema, table, column
		sentinel = ErrSchema
	case "42501": // insufficient privilege: the database's words name the object
		return fmt.Errorf("coord: %s: %w: %w", op, ErrPermission, err)
	default:
		return fmt.Errorf("coord: %s: %w", op, err)
	}
	return fmt.Errorf("coord: %s: %w: %s", op, sentinel, pgErr.Message)
}

// retryable reports whether err is a transient conflict (serialization
// failure or deadlock) after which the whole call may simply be repeated.
// At READ COMMITTED the functions raise neither; this covers pools whose
// sessions default to a stricter isolation level.
func retryable(err error) bool {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) {
		return false
	}
	return pgErr.Code == "40001" || pgErr.Code == "40P01"
}
