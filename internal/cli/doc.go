// Package cli is fleetctl, the operator command line of fleetlimit, as a
// testable package: [Run] parses the arguments, runs one command and returns
// the process exit code; cmd/fleetctl only wires it to os.Args, os.Stdout,
// os.Stderr and os.Exit. The commands are built on github.com/urfave/cli/v2,
// which never exits the process here: every error comes back to Run, which
// prints it on stderr as one line (fleetctl: nodes: unknown key "x") and
// maps it to an exit code.
//
// # Commands
//
//	migrate up                      apply every pending migration
//	migrate down [--to VERSION] [--force]  roll back one step, or to VERSION >= 1 (refuses while nodes are live or capacity is held)
//	migrate reset [--yes] [--force] remove the whole schema (asks; refuses while nodes are live or capacity is held)
//	migrate status [-o json]        list migrations and whether they are applied
//	migrate validate                exit 3 when migrations are pending
//	keys [-o json]                  every key with its ceiling, override, load and rates
//	keys create KEY [--min N] [--max N] [--rpm N] [--tpm N]
//	keys delete KEY [--force]
//	nodes KEY [-o json]             every node row of KEY
//	drain KEY NODE [--wait] [--timeout 30s]
//	undrain KEY NODE
//	evict KEY NODE
//	relearn KEY
//	grant node|operator ROLE        give ROLE a fleet node's or an operator's rights (as the schema owner)
//	revoke ROLE                     take every right grant gives
//	limits get KEY [-o json]
//	limits set KEY [--min N] [--max N] [--clear-min] [--clear-max] [--rpm N] [--tpm N] [--aggregate lower_median|min]
//	watch KEY [--interval 1s] [--count N] [-o json]
//	demo [--duration 40s] [--nodes 4] [--workers 32] [--interval D]
//	version [-o json]
//
// --rpm and --tpm are the key's operator rates, requests and tokens per
// minute, in 0..1000000000 (coord.MaxRate); 0 removes the rate. They are the
// key's rate when its nodes learn none and a cap on what they learn, from
// the key's next heartbeat on. limits set and keys create check every flag
// before writing anything: a bad value in any of them (negative, above the
// maximum, not a number) is a usage error naming the flag and the value,
// and nothing changes. When limits set is given both a bound and a rate and
// the coordinator refuses the bound, the rate is not written either.
//
// Flags may follow positional arguments (drain KEY NODE --wait) and the
// global flags may follow the command (keys --database-url URL); a
// command's own flags come after its name. "--" ends flag parsing wherever
// it comes (drain KEY -- -NODE): everything after it is an argument, but
// for command names right after it, which still name the command
// (limits -- get -KEY is limits get -- -KEY). An unknown flag is named in
// the error as it was typed (-x or --x). A flag that takes a value and is
// followed by another flag, or ends the line, is a usage error. --help=false
// is no request for help. A key, node or role may be called help: only the
// command groups (migrate, keys, limits) have a help subcommand.
//
// # Connection
//
// The database is chosen in this order, first match wins:
//
//  1. the --database-url flag;
//  2. the FLEET_DATABASE_URL environment variable;
//  3. the DATABASE_URL environment variable;
//  4. libpq's environment (PGHOST, PGPORT, PGUSER, PGPASSWORD, PGDATABASE,
//     PGSSLMODE, ...) and its defaults, as pgx reads them.
//
// An empty variable counts as unset; a blank one (white space only), like an
// empty --database-url, is a usage error, never a fall-through to the next
// (demo, which reads neither variable, ignores it).
//
// A URL or keyword/value string from 1–3 is still completed by the PG*
// variables for the parts it leaves out, as in libpq. Every session sets
// application_name=fleetctl (unless the URL or PGAPPNAME names one) and
// statement_timeout (--statement-timeout, default 10s, 0 disables; the flag
// wins when given, else a statement_timeout in the URL, else -c
// statement_timeout in its options or PGOPTIONS, else the default).
// Connecting is bounded by --connect-timeout (default 5s; same precedence
// over the URL's connect_timeout). An unreachable database is one line on
// stderr naming host:port and the cause, exit status 1.
//
// demo uses a database of the operator's only when --database-url (1) names
// one; without the flag it starts a throwaway Postgres cluster
// (internal/pgtemp) and uses that, whatever the environment says:
// FLEET_DATABASE_URL and DATABASE_URL (2, 3) are never used by demo, and
// the PG* variables (4) do not choose its database. They still complete
// its connection string, as for every command, because pgx reads them for
// whatever a connection string leaves out: a --database-url without a
// host, user or password takes PGHOST, PGUSER or PGPASSWORD, and the
// throwaway cluster's connection string, which names the host, port, user,
// database, sslmode and target_session_attrs, takes the rest from them
// (PGPASSWORD, PGOPTIONS, PGTZ, PGSERVICE, ...). One of those set for another
// database can keep demo from using its throwaway cluster (PGTZ naming no
// zone, PGSERVICE naming no service, PGCHANNELBINDING=require, ...): demo
// then fails at once with the connection's error; unset them to run it.
//
// # Exit status
//
//	0  success
//	1  runtime failure: database unreachable, unknown key or node, a
//	   coordinator refusal such as an invalid override
//	2  usage error: unknown command, unknown flag, bad flag value, missing or
//	   extra argument, --output other than table or json, a --min, --max,
//	   --rpm or --tpm out of range
//	3  check failed: migrate validate found pending migrations, drain --wait
//	   timed out
//
// # Output
//
// Read commands (keys, nodes, limits get, migrate status, watch) take
// --output (-o) table|json. Tables are for people and may change. JSON is
// a stable interface: fields are only ever added, never renamed or removed,
// and their names are snake_case. Times are RFC 3339 strings in UTC,
// durations are integer milliseconds in fields ending in _ms, and an absent
// optional value is null.
//
// In tables, a key's RPM and TPM are its rates as the newest heartbeat
// computed them, with the operator's in parentheses when one is set
// ("400 (max 400)"; "- (max 600)" before any heartbeat); the RATE_*
// columns are requests/tokens per minute pairs ("275/30000"), "-" for none;
// a rate share shows "-" on a dimension where the key has no rate (no
// pacing) and 0 where it has one (the node may send nothing). keys shows
// the rate columns, for every key, once a key has a rate or a member with
// a rate share; nodes once a row has a rate share, a rate demand or a rate
// estimate of its own.
//
// keys prints an array of key objects:
//
//	key           string   the key
//	l_global      int      the fleet's ceiling computed by the newest heartbeat;
//	                       0 before a member's first heartbeat (tables print "-")
//	min_limit     int|null operator override lower bound
//	max_limit     int|null operator override upper bound
//	aggregate     string   "lower_median" or "min"
//	epoch         int      the key's grant epoch (moves when the database lost state)
//	generation    int      newest grant generation of the key
//	created_at    time     when the key row was created
//	live_nodes    int      members: rows whose lease runs, not evicted or departed
//	sum_share     int      Σ share over members
//	sum_inflight  int      Σ in-flight over members
//	utilization   float|null  sum_inflight / l_global; null when l_global is 0
//	held_rows     int      rows that are no members but still hold capacity
//	held_reserve  int      Σ reserve of those rows
//	learning_until time|null  end of the key's learning mode; null when not learning
//	unchecked     bool     the database may have lost state since the key was last checked:
//	                       its next heartbeat starts learning mode; false also where that
//	                       cannot be told (a server in recovery, a schema before version 14,
//	                       a role given read rights by hand)
//	drains        array    node ids an operator drained, sorted
//	rpm, tpm      int|null the key's request and token rates per minute as the
//	                       newest heartbeat computed them; null for none
//	rpm_limit, tpm_limit  int|null  the operator's rates per minute; null for none
//	sum_rpm_share, sum_tpm_share  int  Σ rate share over members
//	sum_rpm_used, sum_tpm_used    int  Σ over members of what each sent in the minute before its last report
//
// nodes prints an array of node objects:
//
//	key, node_id, instance     string
//	seq                        int     the newest report's sequence number
//	l_local                    int     the node's own capacity estimate
//	share                      int     its grant
//	inflight, demand           int     as last reported
//	reserve                    int     what the row holds back from the others now
//	epoch                      int     the epoch of its grant
//	granted_gen, applied_gen   int     grant generation issued / acknowledged
//	unacked_high               int     the reserve held for an unacknowledged grant
//	lease_remaining_ms         int     ≤ 0 once the lease has run out
//	hold_remaining_ms          int     how long its reserve still counts; ≤ 0 once it does not
//	heartbeat_age_ms           int     time since the last heartbeat
//	lease_expires_at, hold_until, heartbeat_at, joined_at  time
//	status                     string  "active", "draining", "expired", "departed" or "evicted"
//	draining, evicted, departed bool
//	fenced                     bool    the lease has run out (lease_remaining_ms ≤ 0)
//	labels                     object  string → string
//	rpm_share, tpm_share       int     its rate share per minute (granted)
//	rpm_used, tpm_used         int     what it sent in the minute before its last report
//	rpm_demand, tpm_demand     int     its rate demand per minute, as last reported
//	rpm_local, tpm_local       int|null  its own estimate of the key's rates; null for none
//	rpm_reserve, tpm_reserve   int     what the row holds back from the others' rate shares now
//	rpm_high, tpm_high         int     the largest rate share granted since its last acknowledgement
//
// limits get prints one object: key, min_limit, max_limit, l_global,
// aggregate, rpm_limit, tpm_limit, rpm, tpm (as in keys).
//
// migrate status prints an array: version (int), name (string, the file
// name), state ("applied" or "pending"), applied_at (time|null).
//
// version -o json prints one object: name ("fleetctl"), version (the
// build's version, as the table shows it) and go (the Go release it was
// built with).
//
// watch -o json prints one object per refresh, one per line: time (time of
// the refresh), every field of a keys object, and nodes (an array of node
// objects).
package cli
