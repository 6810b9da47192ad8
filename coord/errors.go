package coord

import "errors"

// ErrInvalidReport is returned (wrapped, with the offending field and value)
// by Heartbeat and Report.Validate when a report is out of range: an empty or
// over-long key, node id or instance, a negative or too large count, a
// negative Seq or AppliedGen, a LeaseTTL outside [MinLeaseTTL, MaxLeaseTTL]
// or malformed labels. Nothing is written.
var ErrInvalidReport = errors.New("invalid report")

// ErrNodeIDInUse is returned by Heartbeat when the node id is held by a live
// row of another instance (two processes configured with one node id).
// Nothing is written. (Leave of a row that another instance holds returns
// ErrUnknownNode: this instance has no row to leave.)
var ErrNodeIDInUse = errors.New("node id in use by another instance")

// ErrUnknownKey is returned by the operator operations and Leave when the key
// has no row: no node has ever heartbeated on it.
var ErrUnknownKey = errors.New("unknown key")

// ErrUnknownNode is returned by the operator operations and Leave when the
// key has no row for the node.
var ErrUnknownNode = errors.New("unknown node")

// ErrInvalidOverride is returned (wrapped, naming the value) by SetLimits and
// SetAggregate for a limit outside [1, MaxCount], a max below the min, or an
// unknown aggregate. Nothing is written.
var ErrInvalidOverride = errors.New("invalid override")

// ErrSchema is returned (wrapped) by the Postgres coordinator when the
// fleetlimit schema is missing or older than this library needs: a table
// or function it calls does not exist. Run "fleetctl migrate up" (or
// migrations.Up) as the schema's owner.
var ErrSchema = errors.New("fleetlimit schema missing or out of date (run 'fleetctl migrate up' as the schema owner)")

// ErrPermission is returned (wrapped, with the database's error) by the
// Postgres coordinator when the connection's role may not call a
// fleetlimit function: the schema owner grants a node's role its rights
// with "fleetctl grant node ROLE" (migrations.Grant), an operator's with
// "fleetctl grant operator ROLE".
var ErrPermission = errors.New("the role lacks the rights")

// ErrOutcomeUnknown is returned (wrapped, with ctx's error) by a Postgres
// coordinator call that changes something (a heartbeat, a departure, an
// operator's call; not the listings and checks) whose context ended while
// its statement still ran past the grace (see Postgres.Leave): the
// statement runs on, so its change — a drain, an eviction, new limits, a
// deleted key — may yet be made. Read the state again (Keys, Nodes) before
// acting on the failure.
var ErrOutcomeUnknown = errors.New("the statement was still running, and its change may yet be made")

// ErrKeyExists is returned by CreateKey when the key has a row already.
var ErrKeyExists = errors.New("key exists")

// ErrLiveNodes is returned by DeleteKey, without force, while the key has
// live members: deleting it would fail their fleets closed.
var ErrLiveNodes = errors.New("key has live nodes")

// ErrHeldCapacity is returned by DeleteKey, without force, while rows
// that are no members (instances that expired, left or were evicted)
// still hold a reserve above 0 for requests that may still run: a key
// re-created without them would grant that capacity again beside those
// requests.
var ErrHeldCapacity = errors.New("key holds capacity for requests that may still run")

// ErrLearning is returned by DeleteKey, without force, while the key's
// rows may not show what its nodes hold: the key last heard from its
// nodes under another incarnation of the database (a failover, a restore
// or a server restart since, see State.Incarnate), or it is in learning
// mode. A node that still runs under a grant the database forgot would
// re-create the key without its limits. Learning mode starts at the key's
// next heartbeat and lasts its longest lease plus request bound; after
// it, the rows are to be trusted again.
var ErrLearning = errors.New("the database may have lost the key's state")
