package migrations

// The SQL this package runs besides goose's. The version table's name is
// unqualified, as goose's own reads name it: the first on the search path.
const (
	sqlLock   = `SELECT pg_advisory_lock($1)`
	sqlUnlock = `SELECT pg_advisory_unlock($1)`
	// sqlApplied lists the applied versions as goose records them (a row
	// per applied version: goose deletes a version's row when it rolls it
	// back; version 0 is the table's own) and when each was applied. goose
	// writes the session's local time: it is read back in this session's
	// TimeZone, right when both sessions use the database's default.
	sqlApplied = `SELECT version_id, max(tstamp) AT TIME ZONE current_setting('TimeZone')
	  FROM ` + VersionTable + ` WHERE version_id > 0 GROUP BY version_id`
	// sqlLockHolder: another session holding the lock $1 in this
	// database (advisory locks are per database), the exclusive holder
	// first, with whether it holds it exclusively.
	sqlLockHolder = `SELECT pid, mode = 'ExclusiveLock' FROM pg_catalog.pg_locks
	 WHERE locktype = 'advisory' AND granted AND objsubid = 1 AND pid <> pg_backend_pid()
	   AND database = (SELECT oid FROM pg_catalog.pg_database WHERE datname = current_database())
	   AND classid = ($1::bigint >> 32)::oid AND objid = ($1::bigint & 4294967295)::oid
	 ORDER BY mode = 'ExclusiveLock' DESC LIMIT 1`
	sqlLockShared   = `SELECT pg_advisory_lock_shared($1)`
	sqlUnlockShared = `SELECT pg_advisory_unlock_shared($1)`
	sqlHasSchema    = `SELECT to_regnamespace('fleetlimit') IS NOT NULL`
	// sqlSchemaVersionFunc: whether fleetlimit.schema_version() exists,
	// and whether this role may call it (a qualified name would fail
	// without USAGE on the schema).
	sqlSchemaVersionFunc = `SELECT count(*) > 0,
	       coalesce(bool_and(has_schema_privilege(n.oid, 'USAGE') AND has_function_privilege(p.oid, 'EXECUTE')), false)
	  FROM pg_proc AS p JOIN pg_namespace AS n ON n.oid = p.pronamespace
	 WHERE n.nspname = 'fleetlimit' AND p.proname = 'schema_version' AND p.pronargs = 0`
	sqlSchemaVersion = `SELECT fleetlimit.schema_version()`
	// sqlVersionTables lists the schemas holding a table named $1, as
	// they are and quoted as a search path needs them, and whether it is
	// the one on the search path.
	sqlVersionTables = `SELECT n.nspname, quote_ident(n.nspname), coalesce(c.oid = to_regclass($1::text)::oid, false)
	  FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
	 WHERE c.relname = $1::text AND c.relkind IN ('r', 'p') ORDER BY n.nspname`
	// sqlVersionRows reads the ids and versions of the version table's
	// rows (goose rolls back in the order of the ids) and, in the same
	// statement, the table's schema.
	sqlVersionRows = `SELECT id, version_id, ` + versionSchema + ` FROM ` + VersionTable + ` ORDER BY id`
	// sqlNewestIn takes a version table quoted by pgx.Identifier, and
	// reads its newest applied version (see sqlApplied).
	sqlNewestIn = `SELECT coalesce(max(version_id), 0) FROM %s WHERE version_id > 0`
	// sqlLiveVersions: some applied version's schema still exists.
	sqlLiveVersions = `SELECT EXISTS (SELECT 1 FROM ` + VersionTable + ` WHERE version_id > 0)
	    AND to_regnamespace('fleetlimit') IS NOT NULL`
	sqlDropVersionTable = `DROP TABLE IF EXISTS ` + VersionTable
	// sqlUnrecordedSchema: the fleetlimit schema exists, and no schema
	// holds a table named $1.
	sqlUnrecordedSchema = `SELECT to_regnamespace('fleetlimit') IS NOT NULL
	   AND NOT EXISTS (SELECT 1 FROM pg_class WHERE relname = $1::text AND relkind IN ('r', 'p'))`
	sqlDropSchema      = `DROP SCHEMA fleetlimit CASCADE`
	sqlHasVersionTable = `SELECT to_regclass('` + VersionTable + `') IS NOT NULL`
	// sqlVersionTablePlace: the schema of the version table on the search
	// path (NULL without one), and the search path's first schema (NULL
	// when none of its schemas exists and may be used), both quoted as a
	// search path needs them; and the search path as set.
	sqlVersionTablePlace = `SELECT quote_ident(` + versionSchema + `), quote_ident(current_schema()),
	       current_setting('search_path')`
	// sqlRoleAsName: role $1 as the server reads a name, cut as its parser
	// cuts an identifier (to max_identifier_length bytes in the server's
	// encoding, never inside a character), and that length.
	sqlRoleAsName = `SELECT $1::text::name::text, current_setting('max_identifier_length')::int`
	// sqlGrantRole hands role $1 a node's or an operator's rights ($2);
	// see fleetlimit.grant_role in the migrations.
	sqlGrantRole = `SELECT fleetlimit.grant_role($1, $2)`
	// sqlVersionTablesToGrant: the schema and name of the version table
	// $1 on the search path or, without one there, of every table named
	// $1; and whether role $2 lacks USAGE on its schema.
	sqlVersionTablesToGrant = `SELECT n.nspname, c.relname, NOT has_schema_privilege($2::text, n.oid, 'USAGE')
	  FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
	 WHERE CASE WHEN to_regclass($1::text) IS NULL THEN c.relname = $1::text AND c.relkind IN ('r', 'p')
	            ELSE c.oid = to_regclass($1::text) END
	 ORDER BY n.nspname`
	// sqlGrantSelect and sqlGrantUsage take identifiers quoted by
	// pgx.Identifier: the table (schema-qualified) or schema, then the role.
	sqlGrantSelect = `GRANT SELECT ON TABLE %s TO %s`
	sqlGrantUsage  = `GRANT USAGE ON SCHEMA %s TO %s`
	// sqlRoles: the current role; the owner of the fleetlimit schema
	// (NULL when there is none) and whether it may log in; the owner of
	// the version table the search path finds (NULL when none); and the
	// database's owner, as names.
	sqlRoles = `SELECT current_user::text, r.rolname::text, coalesce(r.rolcanlogin, true),
	       (SELECT t.rolname::text FROM pg_class AS c JOIN pg_roles AS t ON t.oid = c.relowner
	         WHERE c.oid = to_regclass('` + VersionTable + `')),
	       (SELECT d.rolname::text FROM pg_database AS b JOIN pg_roles AS d ON d.oid = b.datdba WHERE b.datname = current_database())
	  FROM (SELECT 1) AS one
	  LEFT JOIN pg_namespace AS n ON n.nspname = 'fleetlimit'
	  LEFT JOIN pg_roles AS r ON r.oid = n.nspowner`
	// sqlSchemaOwner: whether role $1 owns the fleetlimit schema (false
	// when there is none).
	sqlSchemaOwner = `SELECT coalesce(bool_or(n.nspowner = $1::text::regrole), false)
	  FROM pg_namespace AS n WHERE n.nspname = 'fleetlimit'`
	// sqlRevoke takes the role quoted by pgx.Identifier: everything that
	// grant_role and Grant give in the fleetlimit schema.
	sqlRevoke = `REVOKE ALL ON ALL ROUTINES IN SCHEMA fleetlimit FROM %[1]s;
	REVOKE ALL ON ALL TABLES IN SCHEMA fleetlimit FROM %[1]s;
	REVOKE ALL ON SCHEMA fleetlimit FROM %[1]s`
	// sqlRevokeSelect takes the table (schema-qualified) and the role,
	// quoted by pgx.Identifier.
	sqlRevokeSelect = `REVOKE SELECT ON TABLE %s FROM %s`
)

// versionSchema is an expression: the schema of the version table on the
// search path, NULL without one.
const versionSchema = `(SELECT n.nspname FROM pg_class AS c JOIN pg_namespace AS n ON n.oid = c.relnamespace
	 WHERE c.oid = to_regclass('` + VersionTable + `'))`
