package fleettest

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/fleetlimit/fleetlimit/internal/pgtemp"
)

// Environment variables read by this package.
const (
	envDatabaseURL = "FLEET_TEST_DATABASE_URL"
	envBackend     = "FLEET_TEST_PG"
	envImage       = "FLEET_PG_IMAGE"
	envRequire     = "FLEET_REQUIRE_PG"
	envCI          = "CI"
)

// Backend names, as returned by [Backend] and accepted by FLEET_TEST_PG.
const (
	BackendDSN    = "dsn"
	BackendDocker = "docker"
	BackendInitdb = "initdb"
)

// DefaultImage is the Docker image used when FLEET_PG_IMAGE is unset.
const DefaultImage = "fleetlimit/postgres:15"

// startTimeout bounds starting a backend; stopTimeout bounds stopping it.
const (
	startTimeout = 3 * time.Minute
	stopTimeout  = time.Minute
)

// backend is a running Postgres server.
type backend struct {
	name string
	// adminDSN connects as a role that may create databases.
	adminDSN string
	// stop releases the server; nil when there is nothing to release.
	stop func(context.Context) error
	// note is logged once the backend is up.
	note string
}

// errUnavailable marks "no backend can be found here", which skips tests
// unless Postgres is required.
var errUnavailable = errors.New("fleettest: no Postgres available: set " + envDatabaseURL +
	", or start Docker (scripts/start-dockerd.sh) and build the image (make pg-image), " +
	"or install postgresql so that initdb is on PATH or under /usr/lib/postgresql/*/bin")

var (
	mainCalled  atomic.Bool
	backendName atomic.Value // string, set once the backend is up

	startOnce sync.Once
	started   *backend
	startErr  error
)

// Main runs the tests of m, stops the backend if one was started, and exits
// with the tests' exit code. Call it from TestMain:
//
//	func TestMain(m *testing.M) { fleettest.Main(m) }
func Main(m *testing.M) {
	os.Exit(Run(m))
}

// Run runs the tests of m, stops the backend if one was started, and returns
// the exit code: the tests' code, or 1 if they passed but stopping failed. Use
// it instead of [Main] to do more before exiting, such as a goroutine leak
// check with goleak.Find.
func Run(m *testing.M) int {
	mainCalled.Store(true)
	code := m.Run()
	if err := shutdown(); err != nil {
		fmt.Fprintln(os.Stderr, err)
		if code == 0 {
			code = 1
		}
	}
	return code
}

// Backend returns the name of the backend in use ([BackendDSN],
// [BackendDocker] or [BackendInitdb]), or the empty string while none has
// been started.
func Backend() string {
	name, _ := backendName.Load().(string)
	return name
}

// getBackend starts the backend on first use and returns it. A missing
// backend skips t, or fails it when Postgres is required.
func getBackend(t testing.TB) *backend {
	t.Helper()
	if !mainCalled.Load() {
		t.Fatal("fleettest: TestMain must call fleettest.Main(m) (or fleettest.Run) so that the Postgres backend is stopped after the tests")
	}
	startOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), startTimeout)
		defer cancel()
		begin := time.Now()
		started, startErr = startBackend(ctx)
		elapsed := time.Since(begin)
		if startErr == nil {
			backendName.Store(started.name)
			t.Logf("fleettest: started the %s backend in %s", started.name, elapsed.Round(time.Millisecond))
			if started.note != "" {
				t.Logf("fleettest: %s", started.note)
			}
		}
	})
	if errors.Is(startErr, errUnavailable) {
		if required() {
			t.Fatalf("%v (required because %s=1 or %s is set)", startErr, envRequire, envCI)
		}
		t.Skip(startErr)
	}
	if startErr != nil {
		t.Fatal(startErr)
	}
	return started
}

// required reports whether a missing Postgres must fail tests.
func required() bool {
	if os.Getenv(envRequire) == "1" {
		return true
	}
	ci := os.Getenv(envCI)
	return ci != "" && ci != "false" && ci != "0"
}

// startBackend starts the backend chosen by the environment.
func startBackend(ctx context.Context) (*backend, error) {
	switch choice := os.Getenv(envBackend); choice {
	case BackendDSN:
		url := os.Getenv(envDatabaseURL)
		if url == "" {
			return nil, fmt.Errorf("fleettest: %s=%s but %s is empty", envBackend, choice, envDatabaseURL)
		}
		return &backend{name: BackendDSN, adminDSN: url}, nil
	case BackendDocker:
		return startDocker(ctx)
	case BackendInitdb:
		return startInitdb(ctx)
	case "":
	default:
		return nil, fmt.Errorf("fleettest: %s=%q; want %s, %s or %s", envBackend, choice, BackendDSN, BackendDocker, BackendInitdb)
	}

	if url := os.Getenv(envDatabaseURL); url != "" {
		return &backend{name: BackendDSN, adminDSN: url}, nil
	}
	dockerErr := dockerReachable(ctx)
	if dockerErr == nil {
		b, err := startDocker(ctx)
		if !errors.Is(err, errNoImage) {
			return b, err
		}
		if _, binErr := pgtemp.FindBinDir(); binErr != nil {
			return nil, err
		}
		if b, err = startInitdb(ctx); err == nil {
			b.note = fmt.Sprintf("the Docker engine has no image %s (build it with `make pg-image`): using %s", dockerImage(), BackendInitdb)
		}
		return b, err
	}
	if errors.Is(dockerErr, errUnsafeEnv) {
		return nil, dockerErr
	}
	if _, err := pgtemp.FindBinDir(); err == nil {
		return startInitdb(ctx)
	}
	return nil, fmt.Errorf("%w (docker: %v)", errUnavailable, dockerErr)
}

// startInitdb starts a throwaway cluster with internal/pgtemp.
func startInitdb(ctx context.Context) (*backend, error) {
	cluster, err := pgtemp.Start(ctx, pgtemp.Options{})
	if err != nil {
		return nil, fmt.Errorf("fleettest: %s backend: %w", BackendInitdb, err)
	}
	return &backend{
		name:     BackendInitdb,
		adminDSN: cluster.DSN("postgres"),
		stop:     func(context.Context) error { return cluster.Stop() },
	}, nil
}

// shutdown closes the admin pool and stops the backend, if they were started.
func shutdown() error {
	closeAdmin()
	var stopErr error
	startOnce.Do(func() {}) // nothing may start after this
	if started != nil && started.stop != nil {
		ctx, cancel := context.WithTimeout(context.Background(), stopTimeout)
		defer cancel()
		if err := started.stop(ctx); err != nil {
			stopErr = fmt.Errorf("fleettest: stop %s backend: %w", started.name, err)
		}
	}
	return stopErr
}
