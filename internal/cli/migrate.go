package cli

import (
	"context"
	"path"
	"strconv"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/pressly/goose/v3"
	ucli "github.com/urfave/cli/v2"

	"github.com/fleetlimit/fleetlimit/migrations"
)

func (r *runner) migrateCommand() *ucli.Command {
	return &ucli.Command{
		Name:   "migrate",
		Usage:  "apply, roll back, list or check the fleetlimit schema's migrations",
		Action: r.unknownCommand,
		Subcommands: []*ucli.Command{
			{
				Name:  "up",
				Usage: "apply every pending migration",
				Action: r.action(func(c *ucli.Context) error {
					return r.withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
						before, _, err := schemaVersion(ctx, pool)
						if err != nil {
							return err
						}
						if err := migrations.Up(ctx, pool); err != nil {
							return err
						}
						after, _, err := schemaVersion(ctx, pool)
						if err != nil {
							return err
						}
						if after == before {
							r.printf("schema is up to date at version %d\n", after)
						} else {
							r.printf("migrated from version %d to %d\n", before, after)
						}
						return nil
					})
				}),
			},
			{
				Name:  "down",
				Usage: "roll migrations back to --to VERSION (default 0: remove the whole fleetlimit schema and its data)",
				Flags: []ucli.Flag{
					&ucli.Int64Flag{Name: "to", Usage: "the version to roll back to; 0 removes everything fleetlimit created"},
				},
				Action: r.action(func(c *ucli.Context) error {
					to := c.Int64("to")
					if to < 0 {
						return usageErrorf("invalid value %d for --to: want >= 0", to)
					}
					return r.withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
						before, _, err := schemaVersion(ctx, pool)
						if err != nil {
							return err
						}
						if err := migrations.DownTo(ctx, pool, to); err != nil {
							return err
						}
						after, _, err := schemaVersion(ctx, pool)
						if err != nil {
							return err
						}
						if after == before {
							r.printf("schema is at version %d; nothing to roll back\n", after)
						} else {
							r.printf("rolled back from version %d to %d\n", before, after)
						}
						return nil
					})
				}),
			},
			{
				Name:  "status",
				Usage: "list every migration and whether it is applied",
				Description: `JSON: an array of {version, name, state ("applied" or "pending"),
applied_at (null when pending)}.`,
				Flags: []ucli.Flag{outputFlag()},
				Action: r.action(func(c *ucli.Context) error {
					format, err := outputFormat(c)
					if err != nil {
						return err
					}
					return r.withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
						st, err := migrations.Status(ctx, pool)
						if err != nil {
							return err
						}
						views := newMigrationViews(st)
						if format == formatJSON {
							return writeJSON(r.env.Stdout, views)
						}
						t := newTable(r.env.Stdout, "VERSION", "STATE", "APPLIED_AT", "NAME")
						for _, v := range views {
							at := "-"
							if v.AppliedAt != nil {
								at = v.AppliedAt.Format(time.RFC3339)
							}
							t.row(strconv.FormatInt(v.Version, 10), v.State, at, v.Name)
						}
						return t.flush()
					})
				}),
			},
			{
				Name:  "validate",
				Usage: "exit with status 3 when migrations are pending, 0 when the schema is up to date",
				Action: r.action(func(c *ucli.Context) error {
					return r.withPool(c, func(ctx context.Context, pool *pgxpool.Pool) error {
						current, pending, err := schemaVersion(ctx, pool)
						if err != nil {
							return err
						}
						if pending > 0 {
							return checkFailedf("%d migration(s) pending: schema at version %d; run 'fleetctl migrate up'", pending, current)
						}
						r.printf("schema is up to date at version %d\n", current)
						return nil
					})
				}),
			},
		},
	}
}

// withPool connects and runs fn with the pool, which it then closes.
func (r *runner) withPool(c *ucli.Context, fn func(ctx context.Context, pool *pgxpool.Pool) error) error {
	if _, err := wantArgs(c); err != nil {
		return err
	}
	pool, err := r.openPool(c)
	if err != nil {
		return err
	}
	defer pool.Close()
	return fn(c.Context, pool)
}

// schemaVersion returns the newest applied migration version (0 for none)
// and how many embedded migrations are not applied.
func schemaVersion(ctx context.Context, pool *pgxpool.Pool) (current int64, pending int, err error) {
	st, err := migrations.Status(ctx, pool)
	if err != nil {
		return 0, 0, err
	}
	for _, s := range st {
		if s.State == goose.StateApplied {
			current = max(current, s.Source.Version)
		} else {
			pending++
		}
	}
	return current, pending, nil
}

// migrationView is one migration as migrate status prints it. Its JSON form
// is a stable interface.
type migrationView struct {
	Version   int64      `json:"version"`
	Name      string     `json:"name"`
	State     string     `json:"state"`
	AppliedAt *time.Time `json:"applied_at"`
}

func newMigrationViews(st []*goose.MigrationStatus) []migrationView {
	out := make([]migrationView, len(st))
	for i, s := range st {
		v := migrationView{Version: s.Source.Version, Name: path.Base(s.Source.Path), State: "pending"}
		if s.State == goose.StateApplied {
			v.State = "applied"
			at := s.AppliedAt.UTC()
			v.AppliedAt = &at
		}
		out[i] = v
	}
	return out
}
