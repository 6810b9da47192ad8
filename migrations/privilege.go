package migrations

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// ErrInsufficientPrivilege reports a run of [Up], [DownTo] or [Reset] (and
// [UpVersions], [DownVersions]) that the database refused for a privilege
// the connecting role lacks (SQLSTATE 42501): a node's or an operator's
// role (see [Grant]), say, which may not read the version table or change
// the fleetlimit schema. The error wraps the database's, which names the
// object refused, and says which role was refused and which to run the
// migrations as: the owner of the fleetlimit schema or, before the first
// migration, a role that may create it and the version table, such as
// the database's owner. It names no role when reading them fails too.
// [ExplainPrivilege] gives the same error for a refusal of a caller's own
// read on the way to a run.
var ErrInsufficientPrivilege = errors.New("the role lacks a privilege that migrating takes")

// ExplainPrivilege returns err wrapped with [ErrInsufficientPrivilege],
// naming the role refused and the role to run migrations as, when err
// wraps the database's refusal for a privilege the role lacks (SQLSTATE
// 42501); any other err, nil, and one already explained, it returns as it
// is. [Up], [DownTo] and [Reset] explain their own refusals; a caller that
// reads the database on the way to one of them ([Status] before a
// rollback, say) explains a refusal of its read with it, as the run
// would. It reads the roles' names with pool, and is safe for concurrent
// use.
func ExplainPrivilege(ctx context.Context, pool *pgxpool.Pool, err error) error {
	var pgErr *pgconn.PgError
	if !errors.As(err, &pgErr) || pgErr.Code != "42501" || errors.Is(err, ErrInsufficientPrivilege) {
		return err
	}
	var role string
	var owner, table, dba *string
	var ownerLogs bool
	if qerr := pool.QueryRow(ctx, sqlRoles).Scan(&role, &owner, &ownerLogs, &table, &dba); qerr != nil {
		return fmt.Errorf("%w; %w: run migrations as the owner of the fleetlimit schema (and reading which role that is failed: %w)",
			err, ErrInsufficientPrivilege, qerr)
	}
	name := func(r string) string { return "role " + pgx.Identifier{r}.Sanitize() }
	id := func(r string) string { return pgx.Identifier{r}.Sanitize() }
	var advice string
	switch {
	case owner == nil && table != nil && *table != role:
		advice = fmt.Sprintf("%s does not own the version table %s, and there is no fleetlimit schema; run migrations as its owner, %s",
			name(role), VersionTable, id(*table))
	case owner == nil && dba != nil && *dba == role:
		advice = fmt.Sprintf("%s, the database's owner, may not create the version table in the first schema of its search path: "+
			"grant it CREATE there, or give it a search path whose first schema it may create in", name(role))
	case owner == nil && dba != nil:
		advice = fmt.Sprintf("%s may not create the fleetlimit schema or the version table; run the first migration "+
			"as a role that may (CREATE on the database and on the first schema of its search path), such as the database's owner, %s: "+
			"that role then owns the schema, and runs the migrations after it", name(role), id(*dba))
	case owner == nil:
		advice = fmt.Sprintf("%s may not create the fleetlimit schema or the version table; run the first migration "+
			"as a role that may (CREATE on the database and on the first schema of its search path)", name(role))
	case *owner == role:
		advice = fmt.Sprintf("%s owns the fleetlimit schema, and lacks the privilege named: grant it that, or run migrations as a superuser", name(role))
	case !ownerLogs:
		advice = fmt.Sprintf("%s does not own the fleetlimit schema (a node's or an operator's rights do not include changing it); "+
			"run migrations as its owner, %s, which may not log in: connect as a member of it with options=-c role=%s",
			name(role), id(*owner), optionsValue(*owner))
	default:
		advice = fmt.Sprintf("%s does not own the fleetlimit schema (a node's or an operator's rights do not include changing it); "+
			"run migrations as its owner, %s", name(role), id(*owner))
	}
	return fmt.Errorf("%w; %w: %s", err, ErrInsufficientPrivilege, advice)
}

// optionsValue writes v as a value in a connection's options, which the
// server splits at spaces, a backslash escaping the character after it.
func optionsValue(v string) string {
	return strings.NewReplacer(`\`, `\\`, " ", `\ `).Replace(v)
}
