// Package fleettest helps test code that uses fleetlimit: it gives each test
// a freshly migrated Postgres database of its own, a coordinator on it, or an
// in-memory coordinator, and starts fleet nodes that stop at the test's end.
//
// Import it from tests only. fleetlimit's own tests use it too.
//
// # Backends
//
// One Postgres server (the backend) is started per test binary, on first use,
// and stopped after the tests by [Main] (or [Run]). It is chosen in this order:
//
//  1. FLEET_TEST_DATABASE_URL, when set: an existing server; the role must be
//     allowed to create databases. Backend "dsn".
//  2. A reachable Docker engine: a testcontainers-go postgres container from
//     the local image FLEET_PG_IMAGE (default "fleetlimit/postgres:15", built
//     offline by scripts/build-pg-image.sh; `make pg-image`). The image is
//     never pulled: without it, the backend is initdb's when initdb is
//     found (the test log says so), and an error naming the image
//     otherwise. Backend "docker".
//  3. initdb and postgres on PATH or under /usr/lib/postgresql/*/bin: a
//     throwaway cluster from internal/pgtemp. Backend "initdb".
//  4. Otherwise tests skip with a message saying what to install, except when
//     FLEET_REQUIRE_PG=1 or CI is set (and not "false" or "0"): then they fail.
//
// FLEET_TEST_PG=dsn|docker|initdb forces one backend; if it cannot start,
// tests fail.
//
// Before any testcontainers-go call, the docker backend sets
// TESTCONTAINERS_RYUK_DISABLED=true and TESTCONTAINERS_HOST_OVERRIDE=127.0.0.1
// when they are unset, and refuses to start when they are set otherwise, when
// DOCKER_HOST names a non-loopback address, or when the engine is not reached
// through a unix socket or a loopback address. The container's port is
// published on 127.0.0.1 only. Ryuk being disabled, a test binary killed
// before [Main] returns leaves its container running; containers carry the
// label org.fleetlimit.fleettest.owner naming the process that started them, and
// the next docker backend to start removes those whose process is gone. By
// hand: `docker rm -f $(docker ps -aq --filter label=org.fleetlimit.fleettest)`.
//
// # Databases
//
// The first test that needs a migrated database creates the template
// database fleetlimit_tpl_<first 16 hex digits of migrations.Hash()> (unless
// it exists), migrates it with migrations.Up and marks it as a template that
// accepts no connections; test binaries racing on one server serialize on an
// advisory lock. Each call to [Pool] or [DSN] then creates
// fleetlimit_test_<unix time>_<random> from that template (CREATE DATABASE …
// TEMPLATE, about 0.1-0.2 s here) and drops it WITH (FORCE) at
// the test's cleanup. [EmptyDSN] does the same from template0, for migration
// tests. Test databases older than six hours, left behind by killed test
// binaries, are dropped when the template is first checked.
//
// # Use
//
//	func TestMain(m *testing.M) { fleettest.Main(m) }
//
//	func TestTwoNodesShareAKey(t *testing.T) {
//		t.Parallel()
//		c := fleettest.Coordinator(t) // a coord.Postgres on its own database
//		maxLimit := 10
//		if err := c.CreateKey(t.Context(), "partner-api", nil, &maxLimit); err != nil {
//			t.Fatal(err)
//		}
//		a := fleettest.StartNode(t, c, fleet.Config{Key: "partner-api", NodeID: "a"})
//		b := fleettest.StartNode(t, c, fleet.Config{Key: "partner-api", NodeID: "b"})
//		...
//		fleettest.WaitFor(t, a, 5*time.Second, func(s fleet.State) bool { return s.LiveNodes == 2 })
//	}
//
// [Pool] and [DSN] give the bare database, for code that opens its own
// connections or runs its own queries. Unit tests that need no Postgres use
// [Memory] with fleet.NewWithCoordinator, as the example shows. The examples
// module of the repository (examples/) holds a complete test written this
// way.
//
// Every function is safe for concurrent use by parallel tests. Using a
// database before TestMain has called [Main] or [Run] fails the test, because
// nothing would stop the backend afterwards.
package fleettest
