// Package pgtemp starts a throwaway Postgres cluster: initdb into a temporary
// directory, a postgres server listening only on 127.0.0.1 at a free port with
// its unix socket in that directory, and removal of everything at [Cluster.Stop].
//
// The cluster is tuned for tests, demos and benchmarks, not for durability:
// fsync, synchronous_commit and full_page_writes are off, and max_connections
// defaults to 300 so that pools serving a thousand goroutines fit. Clients
// connect as the superuser "postgres" with trust authentication, which is only
// acceptable because nothing but the local machine can reach the server.
//
// Postgres refuses to run as root. When the calling process is root, initdb and
// postgres run as an unprivileged user (by default "postgres"), which owns the
// temporary directory.
//
// The server runs in a process group of its own, so a Ctrl-C at the
// terminal reaches the caller only, which can then stop it in order. If the
// calling process dies without calling Stop, the kernel sends the server
// SIGINT (a fast shutdown), but the temporary directory stays behind.
//
// For fault-injection tests a cluster can be restarted ([Cluster.Restart]),
// stopped in a given [ShutdownMode] — fast, immediate or kill -9 — and started
// again on the same port ([Cluster.StopServer], [Cluster.StartServer]), and
// replicated: [StartReplica] makes a streaming hot standby with pg_basebackup
// -R from any address (a proxy in front of the primary, so replication can be
// cut), and [Cluster.Promote] promotes it with pg_ctl promote. Replication
// needs Options.Settings that keep the defaults' wal_level and
// max_wal_senders; a cluster that must survive crashes wants fsync on.
//
// fleetlimit's tests reach this package through fleettest; fleetctl demo
// uses it directly as its embedded database.
package pgtemp
