package migrations

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Grant gives role what a fleet node (kind "node") or an operator (kind
// "operator") needs, and nothing more, through fleetlimit.grant_role. An
// operator also gets SELECT on the version table wherever it is (the one
// on the caller's search path, or every table named [VersionTable] when
// none is on it) and USAGE on that table's schema when role lacks it: an
// operator whose search path starts with that schema reads the status
// (see [ErrSchemaUnrecorded]). Grant is the schema owner's to call; it
// grants everything or nothing.
func Grant(ctx context.Context, pool *pgxpool.Pool, role, kind string) error {
	err := pgx.BeginFunc(ctx, pool, func(tx pgx.Tx) error {
		if _, err := tx.Exec(ctx, sqlGrantRole, role, kind); err != nil {
			return err
		}
		if kind != "operator" {
			return nil
		}
		type table struct {
			schema, name string
			usage        bool // role needs USAGE on schema
		}
		rows, err := tx.Query(ctx, sqlVersionTablesToGrant, VersionTable, role)
		if err != nil {
			return fmt.Errorf("look for %s: %w", VersionTable, err)
		}
		tables, err := pgx.CollectRows(rows, func(row pgx.CollectableRow) (table, error) {
			var t table
			return t, row.Scan(&t.schema, &t.name, &t.usage)
		})
		if err != nil {
			return fmt.Errorf("look for %s: %w", VersionTable, err)
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
