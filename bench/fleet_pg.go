package bench

import (
	"context"
	"errors"
	"fmt"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetlimit/fleetlimit/internal/pgtemp"
	"github.com/fleetlimit/fleetlimit/migrations"
)

// FleetPostgres is a throwaway Postgres cluster (internal/pgtemp) on
// 127.0.0.1 with fleetlimit's schema migrated into its "postgres"
// database, for the fleetlimit way of the fleet comparison.
type FleetPostgres struct {
	Pool    *pgxpool.Pool
	cluster *pgtemp.Cluster
}

// StartFleetPostgres starts the cluster, connects a pool of at most
// maxConns connections and applies the migrations. It returns an error
// wrapping pgtemp.ErrNotInstalled when Postgres is not installed. Call
// Stop when done.
func StartFleetPostgres(ctx context.Context, maxConns int) (*FleetPostgres, error) {
	cluster, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err != nil {
		return nil, fmt.Errorf("bench: postgres: %w", err)
	}
	cfg, err := pgxpool.ParseConfig(cluster.DSN("postgres"))
	if err != nil {
		return nil, errors.Join(fmt.Errorf("bench: postgres: %w", err), cluster.Stop())
	}
	cfg.MaxConns = int32(maxConns)
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, errors.Join(fmt.Errorf("bench: postgres: %w", err), cluster.Stop())
	}
	if err := migrations.Up(ctx, pool); err != nil {
		pool.Close()
		return nil, errors.Join(fmt.Errorf("bench: postgres: migrate: %w", err), cluster.Stop())
	}
	return &FleetPostgres{Pool: pool, cluster: cluster}, nil
}

// Stop closes the pool and removes the cluster.
func (p *FleetPostgres) Stop() error {
	p.Pool.Close()
	return p.cluster.Stop()
}
