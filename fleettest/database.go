package fleettest

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/fleetlimit/fleetlimit/migrations"
)

// Database names. Test database names embed their creation time so that
// leftovers can be recognised as stale.
const (
	templatePrefix = "fleetlimit_tpl_"
	testDBPrefix   = "fleetlimit_test_"
)

// staleAfter is the age past which a test database is a leftover of a killed
// test binary.
const staleAfter = 6 * time.Hour

// templateLockID is the advisory lock key held while a template database is
// checked or built; it differs from migrations.LockID.
const templateLockID int64 = 0x666c74706c6c6f63 // "fltplloc"

// dbTimeout bounds creating or dropping one database.
const dbTimeout = time.Minute

var (
	adminMu   sync.Mutex
	adminPool *pgxpool.Pool

	templateOnce sync.Once
	templateErr  error
)

// Pool returns a pool connected to a new database migrated to the current
// schema. The pool has pgxpool's default size (at least 4 connections); to
// size it, call [DSN] and pgxpool.ParseConfig. The pool is closed and the
// database dropped at t's cleanup. Pool skips or fails t when no Postgres is
// available (see the package doc).
func Pool(t testing.TB) *pgxpool.Pool {
	t.Helper()
	dsn := DSN(t)
	pool, err := pgxpool.New(context.Background(), dsn)
	if err != nil {
		t.Fatalf("fleettest: open pool: %v", err)
	}
	t.Cleanup(pool.Close)
	return pool
}

// DSN returns a connection URL for a new database migrated to the current
// schema, for code that opens its own connections. The database is dropped
// at t's cleanup, disconnecting anything still connected. DSN skips or fails t
// when no Postgres is available (see the package doc).
func DSN(t testing.TB) string {
	t.Helper()
	b := getBackend(t)
	admin := getAdmin(t, b)
	templateOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		begin := time.Now()
		templateErr = ensureTemplate(ctx, admin, b.adminDSN)
		if templateErr == nil {
			t.Logf("fleettest: template %s ready in %s", TemplateName(), time.Since(begin).Round(time.Millisecond))
		}
	})
	if templateErr != nil {
		t.Fatal(templateErr)
	}
	return createDatabase(t, b, admin, TemplateName())
}

// EmptyDSN returns a connection URL for a new database without fleetlimit's
// schema (a copy of template0), for migration tests. The database is dropped
// at t's cleanup. EmptyDSN skips or fails t when no Postgres is available.
func EmptyDSN(t testing.TB) string {
	t.Helper()
	b := getBackend(t)
	return createDatabase(t, b, getAdmin(t, b), "template0")
}

// TemplateName returns the name of the template database for the embedded
// migrations: fleetlimit_tpl_ followed by the first 16 hex digits of
// migrations.Hash().
func TemplateName() string {
	return templatePrefix + migrations.Hash()[:16]
}

// getAdmin returns the pool that creates and drops databases, opening it on
// first use.
func getAdmin(t testing.TB, b *backend) *pgxpool.Pool {
	t.Helper()
	adminMu.Lock()
	defer adminMu.Unlock()
	if adminPool != nil {
		return adminPool
	}
	cfg, err := pgxpool.ParseConfig(b.adminDSN)
	if err != nil {
		t.Fatalf("fleettest: %s backend address: %v", b.name, err)
	}
	cfg.MaxConns = 4
	pool, err := pgxpool.NewWithConfig(context.Background(), cfg)
	if err != nil {
		t.Fatalf("fleettest: open admin pool: %v", err)
	}
	adminPool = pool
	return adminPool
}

// closeAdmin closes the admin pool if it is open.
func closeAdmin() {
	adminMu.Lock()
	defer adminMu.Unlock()
	if adminPool != nil {
		adminPool.Close()
		adminPool = nil
	}
}

// createDatabase creates a database from template, registers its drop at t's
// cleanup and returns its connection URL.
func createDatabase(t testing.TB, b *backend, admin *pgxpool.Pool, template string) string {
	t.Helper()
	name := fmt.Sprintf("%s%d_%s", testDBPrefix, time.Now().Unix(), randomHex(6))
	ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
	defer cancel()
	if _, err := admin.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE "+ident(template)); err != nil {
		t.Fatalf("fleettest: create database %s from %s: %v", name, template, err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), dbTimeout)
		defer cancel()
		if err := dropDatabase(ctx, admin, name); err != nil {
			t.Error(err)
		}
	})
	dsn, err := withDatabase(b.adminDSN, name)
	if err != nil {
		t.Fatal(err)
	}
	return dsn
}

// ensureTemplate makes sure the template database for the current migrations
// exists, building it if needed. Processes racing on one server serialize on
// an advisory lock; a half-built template left by a killed process (one not
// yet marked as a template) is rebuilt.
func ensureTemplate(ctx context.Context, admin *pgxpool.Pool, adminDSN string) error {
	name := TemplateName()
	conn, err := pgx.Connect(ctx, adminDSN)
	if err != nil {
		return fmt.Errorf("fleettest: connect: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	if _, err := conn.Exec(ctx, "SELECT pg_advisory_lock($1)", templateLockID); err != nil {
		return fmt.Errorf("fleettest: lock template: %w", err)
	}

	if err := dropStaleDatabases(ctx, admin, time.Now()); err != nil {
		return err
	}

	var isTemplate bool
	err = conn.QueryRow(ctx, "SELECT datistemplate FROM pg_database WHERE datname = $1", name).Scan(&isTemplate)
	switch {
	case err == nil && isTemplate:
		return nil
	case err == nil:
		if err := dropDatabase(ctx, admin, name); err != nil {
			return err
		}
	case !errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("fleettest: look up template %s: %w", name, err)
	}

	if _, err := conn.Exec(ctx, "CREATE DATABASE "+ident(name)+" TEMPLATE template0"); err != nil {
		return fmt.Errorf("fleettest: create template %s: %w", name, err)
	}
	dsn, err := withDatabase(adminDSN, name)
	if err != nil {
		return err
	}
	pool, err := pgxpool.New(ctx, dsn)
	if err != nil {
		return fmt.Errorf("fleettest: connect to template %s: %w", name, err)
	}
	err = migrations.Up(ctx, pool)
	pool.Close()
	if err != nil {
		return fmt.Errorf("fleettest: migrate template %s: %w", name, err)
	}
	if _, err := conn.Exec(ctx, "ALTER DATABASE "+ident(name)+" WITH IS_TEMPLATE true ALLOW_CONNECTIONS false"); err != nil {
		return fmt.Errorf("fleettest: mark %s as a template: %w", name, err)
	}
	return nil
}

// dropStaleDatabases drops test databases created more than staleAfter
// before now.
func dropStaleDatabases(ctx context.Context, admin *pgxpool.Pool, now time.Time) error {
	rows, err := admin.Query(ctx, "SELECT datname FROM pg_database WHERE starts_with(datname, $1)", testDBPrefix)
	if err != nil {
		return fmt.Errorf("fleettest: list test databases: %w", err)
	}
	names, err := pgx.CollectRows(rows, pgx.RowTo[string])
	if err != nil {
		return fmt.Errorf("fleettest: list test databases: %w", err)
	}
	for _, name := range names {
		created, ok := createdAt(name)
		if !ok || now.Sub(created) < staleAfter {
			continue
		}
		if err := dropDatabase(ctx, admin, name); err != nil {
			return err
		}
	}
	return nil
}

// createdAt parses the creation time embedded in a test database's name.
func createdAt(name string) (time.Time, bool) {
	rest, ok := strings.CutPrefix(name, testDBPrefix)
	if !ok {
		return time.Time{}, false
	}
	secs, _, ok := strings.Cut(rest, "_")
	if !ok {
		return time.Time{}, false
	}
	unix, err := strconv.ParseInt(secs, 10, 64)
	if err != nil {
		return time.Time{}, false
	}
	return time.Unix(unix, 0), true
}

// dropDatabase drops name, disconnecting its sessions.
func dropDatabase(ctx context.Context, admin *pgxpool.Pool, name string) error {
	if _, err := admin.Exec(ctx, "DROP DATABASE IF EXISTS "+ident(name)+" WITH (FORCE)"); err != nil {
		return fmt.Errorf("fleettest: drop database %s: %w", name, err)
	}
	return nil
}

// withDatabase returns dsn with its database replaced by name. dsn is a URL
// (postgres:// or postgresql://) or a keyword/value string.
func withDatabase(dsn, name string) (string, error) {
	if strings.HasPrefix(dsn, "postgres://") || strings.HasPrefix(dsn, "postgresql://") {
		u, err := url.Parse(dsn)
		if err != nil {
			return "", fmt.Errorf("fleettest: parse database URL: %w", err)
		}
		u.Path = "/" + name
		u.RawPath = ""
		q := u.Query()
		if q.Has("dbname") {
			q.Set("dbname", name)
			u.RawQuery = q.Encode()
		}
		return u.String(), nil
	}
	return dsn + " dbname=" + name, nil
}

// ident quotes a database name for use in SQL.
func ident(name string) string {
	return pgx.Identifier{name}.Sanitize()
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
