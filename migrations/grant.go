package migrations

import (
	"context"
	"errors"
	"fmt"
	"strings"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Grant gives role what a fleet node (kind "node") or an operator (kind
// "operator") needs in the fleetlimit schema, and nothing more there,
// through fleetlimit.grant_role. An operator also gets SELECT on the
// version table wherever it is (the one on the caller's search path, or
// every table named [VersionTable] when none is on it), so that with a
// search path that starts with that table's schema it reads the status
// (see [ErrSchemaUnrecorded]).
//
// Reading a table takes USAGE on its schema, and Postgres grants USAGE
// only on a whole schema: when role lacks it on the version table's schema
// (a schema of the migrating role's own, say; on public every role has it
// by default), Grant grants USAGE on that schema. That is more than the
// version table: role may then use every object in that schema on which
// it, or PUBLIC, holds a privilege; by default that is EXECUTE on every
// function and procedure there and USAGE on every type. Tables, views and
// sequences there stay closed unless granted. To give an operator nothing
// beyond fleetlimit's, keep the version table in public or in a schema
// that holds nothing else (migrate with a search path that starts with
// it). Grant is the schema owner's to call; it grants everything or
// nothing. It refuses the role public, which Postgres reads as PUBLIC,
// every role in the cluster, and a name longer than the server keeps
// whole ([ErrRoleTooLong]).
func Grant(ctx context.Context, pool *pgxpool.Pool, role, kind string) error {
	if strings.EqualFold(role, "public") {
		return fmt.Errorf("migrations: grant %s rights to %q: that is PUBLIC, every role in the cluster; "+
			"grant a role of its own (CREATE ROLE name LOGIN)", kind, role)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := checkRoleLength(ctx, tx, role); err != nil {
			return err
		}
		if _, err := tx.Exec(ctx, sqlGrantRole, role, kind); err != nil {
			return err
		}
		if kind != "operator" {
			return nil
		}
		tables, err := versionTables(ctx, tx, role)
		if err != nil {
			return err
		}
		grantee := pgx.Identifier{role}.Sanitize()
		for _, t := range tables {
			if t.usage {
				if _, err := tx.Exec(ctx, fmt.Sprintf(sqlGrantUsage, pgx.Identifier{t.schema}.Sanitize(), grantee)); err != nil {
					return fmt.Errorf("grant USAGE on schema %q: %w", t.schema, err)
				}
			}
			if _, err := tx.Exec(ctx, fmt.Sprintf(sqlGrantSelect, pgx.Identifier{t.schema, t.name}.Sanitize(), grantee)); err != nil {
				return fmt.Errorf("grant SELECT on %s: %w", pgx.Identifier{t.schema, t.name}.Sanitize(), err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrations: grant %s rights to %q: %w", kind, role, err)
	}
	return nil
}

// Revoke takes from role every right [Grant] gives, of either kind: on
// the fleetlimit schema, its tables and its functions, and SELECT on the
// version table wherever Grant would grant it. It leaves USAGE on the
// version table's schema (Grant cannot tell whether role had it before),
// and the role itself. A fleet node of role fails at its next heartbeat
// ([coord.ErrPermission]) and fails closed when its lease runs out; an
// operator's commands fail. Revoke is the schema owner's to call, refuses
// the owner itself (who keeps its rights as the owner in any case, and
// whose own grants would be taken), public and a name longer than the
// server keeps whole ([ErrRoleTooLong]), and revokes everything or
// nothing.
func Revoke(ctx context.Context, pool *pgxpool.Pool, role string) error {
	if strings.EqualFold(role, "public") {
		return fmt.Errorf("migrations: revoke the rights of %q: that is PUBLIC, every role in the cluster, "+
			"which fleetlimit's migrations give nothing; revoke the roles that were granted them", role)
	}
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if err := checkRoleLength(ctx, tx, role); err != nil {
			return err
		}
		var owner bool
		if err := tx.QueryRow(ctx, sqlSchemaOwner, role).Scan(&owner); err != nil {
			return err
		}
		if owner {
			return fmt.Errorf("%w: it owns the fleetlimit schema", ErrSchemaOwner)
		}
		grantee := pgx.Identifier{role}.Sanitize()
		if _, err := tx.Exec(ctx, fmt.Sprintf(sqlRevoke, grantee)); err != nil {
			return err
		}
		tables, err := versionTables(ctx, tx, role)
		if err != nil {
			return err
		}
		for _, t := range tables {
			name := pgx.Identifier{t.schema, t.name}.Sanitize()
			if _, err := tx.Exec(ctx, fmt.Sprintf(sqlRevokeSelect, name, grantee)); err != nil {
				return fmt.Errorf("revoke SELECT on %s: %w", name, err)
			}
		}
		return nil
	})
	if err != nil {
		return fmt.Errorf("migrations: revoke the rights of %q: %w", role, err)
	}
	return nil
}

// ErrRoleTooLong is returned by [Grant] and [Revoke] for a role name longer
// than the server's max_identifier_length (63 bytes by default): Postgres
// would cut it to that length, and the rights would go to, or be taken
// from, whichever role has the shorter name.
var ErrRoleTooLong = errors.New("role name too long")

// checkRoleLength refuses a role name the server would cut short.
func checkRoleLength(ctx context.Context, tx pgx.Tx, role string) error {
	var (
		read string
		most int
	)
	if err := tx.QueryRow(ctx, sqlRoleAsName, role).Scan(&read, &most); err != nil {
		return fmt.Errorf("read the role as a name: %w", err)
	}
	if read != role {
		return fmt.Errorf("%w: over the server's max_identifier_length of %d bytes; Postgres would read it as %q, "+
			"and a role by that name, if any, would get or lose the rights", ErrRoleTooLong, most, read)
	}
	return nil
}

// ErrSchemaOwner is returned by [Revoke] for the role that owns the
// fleetlimit schema.
var ErrSchemaOwner = errors.New("the schema owner's rights cannot be revoked")

// versionTable is a version table Grant grants an operator SELECT on.
type versionTable struct {
	schema, name string
	usage        bool // the role lacks USAGE on schema
}

// versionTables lists the version tables Grant grants role SELECT on:
// the one on the search path, or every table named VersionTable.
func versionTables(ctx context.Context, tx pgx.Tx, role string) ([]versionTable, error) {
	rows, err := tx.Query(ctx, sqlVersionTablesToGrant, VersionTable, role)
	if err != nil {
		return nil, fmt.Errorf("look for %s: %w", VersionTable, err)
	}
	tables, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (versionTable, error) {
		var t versionTable
		err := row.Scan(&t.schema, &t.name, &t.usage)
		return t, err
	})
	if err != nil {
		return nil, fmt.Errorf("look for %s: %w", VersionTable, err)
	}
	return tables, nil
}
