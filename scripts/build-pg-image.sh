#!/usr/bin/env bash
# build-pg-image.sh builds a Postgres 15 Docker image without any image
# registry: it bootstraps a minimal Debian bookworm root filesystem with
# postgresql-15 from the machine's configured Debian mirror, adds an entrypoint
# compatible with the official postgres image, and imports the result with
# `docker import`.
#
# Usage: scripts/build-pg-image.sh [NAME]     (NAME defaults to fleetlimit/postgres:15)
#
# Environment:
#   DEBIAN_MIRROR   Debian mirror URL; defaults to the bookworm mirror found in
#                   /etc/apt/sources.list and /etc/apt/sources.list.d/*.
#   TMPDIR          where the temporary root filesystem is built (default /var/tmp).
#
# The script is idempotent: if NAME already exists locally it exits 0 at once.
# It must run as root (debootstrap) and needs a reachable Docker engine
# (scripts/start-dockerd.sh starts one).
set -euo pipefail

name="${1:-fleetlimit/postgres:15}"
suite=bookworm
pg_major=15

say() { echo "build-pg-image: $*"; }
die() { echo "build-pg-image: $*" >&2; exit 1; }

if ! command -v docker >/dev/null 2>&1; then
	die "docker CLI not found; install it with: apt-get install -y docker.io"
fi
if ! docker info >/dev/null 2>&1; then
	die "no Docker engine answers; start one with scripts/start-dockerd.sh"
fi
if docker image inspect "$name" >/dev/null 2>&1; then
	say "image $name already exists; nothing to do"
	exit 0
fi
if [ "$(id -u)" != 0 ]; then
	die "debootstrap needs root; rerun as root"
fi
if ! command -v debootstrap >/dev/null 2>&1; then
	die "debootstrap not found; install it with: apt-get install -y debootstrap"
fi

find_mirror() {
	local f uri suites line
	# deb822 .sources files: a stanza's URIs and Suites.
	for f in /etc/apt/sources.list.d/*.sources; do
		[ -f "$f" ] || continue
		uri="" suites=""
		while IFS= read -r line || [ -n "$line" ]; do
			case "$line" in
			URIs:*) uri="$(echo "${line#URIs:}" | awk '{print $1}')" ;;
			Suites:*) suites="${line#Suites:}" ;;
			"")
				if [ -n "$uri" ] && [[ " $suites " == *" $suite "* ]]; then
					echo "$uri"
					return 0
				fi
				uri="" suites=""
				;;
			esac
		done <"$f"
		if [ -n "$uri" ] && [[ " $suites " == *" $suite "* ]]; then
			echo "$uri"
			return 0
		fi
	done
	# One-line .list files: deb [options] URI SUITE COMPONENTS...
	for f in /etc/apt/sources.list /etc/apt/sources.list.d/*.list; do
		[ -f "$f" ] || continue
		uri="$(sed -e 's/\[[^]]*\]//' "$f" | awk -v s="$suite" '$1 == "deb" && $3 == s {print $2; exit}')"
		if [ -n "$uri" ]; then
			echo "$uri"
			return 0
		fi
	done
	return 1
}

mirror="${DEBIAN_MIRROR:-}"
if [ -z "$mirror" ]; then
	mirror="$(find_mirror)" || die "no Debian $suite mirror found in /etc/apt/sources.list{,.d/*}; set DEBIAN_MIRROR"
fi

dir="$(mktemp -d "${TMPDIR:-/var/tmp}/fleetlimit-pg-rootfs.XXXXXX")"

bootstrap_pid=""

cleanup() {
	local m
	if [ -n "$bootstrap_pid" ] && kill -0 "$bootstrap_pid" 2>/dev/null; then
		say "stopping debootstrap"
		kill -TERM -- "-$bootstrap_pid" 2>/dev/null || true
		wait "$bootstrap_pid" 2>/dev/null || true
	fi
	# debootstrap mounts /proc and /sys inside the target; unmount anything
	# left there (deepest first) before deleting, and never cross into
	# another file system.
	for m in $(awk -v d="$dir" 'index($2, d"/") == 1 {print $2}' /proc/mounts | sort -r); do
		umount -l "$m" 2>/dev/null || true
	done
	rm -rf --one-file-system "$dir"
	rm -f "$dir.debootstrap.log"
}
trap cleanup EXIT
trap 'exit 130' INT TERM HUP

start=$(date +%s)
say "building $name from $mirror ($suite, postgresql-$pg_major) in $dir"
say "running debootstrap (about a minute; log: $dir.debootstrap.log)"
# debootstrap runs in its own process group, so that an interrupted build can
# stop it and everything it started before cleaning up.
setsid debootstrap --variant=minbase --include="postgresql-$pg_major" "$suite" "$dir" "$mirror" >"$dir.debootstrap.log" 2>&1 &
bootstrap_pid=$!
if ! wait "$bootstrap_pid"; then
	bootstrap_pid=""
	tail -n 30 "$dir.debootstrap.log" >&2
	die "debootstrap failed (output above)"
fi
bootstrap_pid=""
rm -f "$dir.debootstrap.log"

say "removing the packaged cluster, apt caches and documentation"
rm -rf "$dir/var/lib/postgresql/$pg_major" "$dir/etc/postgresql/$pg_major" \
	"$dir"/var/cache/apt/archives/*.deb "$dir"/var/lib/apt/lists/* \
	"$dir"/usr/share/doc/* "$dir"/usr/share/man/* "$dir"/usr/share/info/*

say "installing the entrypoint /usr/local/bin/docker-entrypoint.sh"
mkdir -p "$dir/usr/local/bin" "$dir/docker-entrypoint-initdb.d"
cat >"$dir/usr/local/bin/docker-entrypoint.sh" <<'ENTRYPOINT'
#!/bin/bash
# docker-entrypoint.sh runs Postgres the way the official postgres image does:
# it honours POSTGRES_USER (default postgres), POSTGRES_PASSWORD (empty means
# trust authentication), POSTGRES_DB (default POSTGRES_USER), PGDATA and
# /docker-entrypoint-initdb.d/*.sh|*.sql; it initializes the data directory on
# first start with a temporary socket-only server, so the log line "database
# system is ready to accept connections" appears once for that server and
# once for the real one; and it passes `postgres ARGS...` (or `-c ...` flags
# alone) to the real server, which listens on all container interfaces.
set -Eeuo pipefail

export PGDATA="${PGDATA:-/var/lib/postgresql/data}"
export POSTGRES_USER="${POSTGRES_USER:-postgres}"
export POSTGRES_DB="${POSTGRES_DB:-$POSTGRES_USER}"
POSTGRES_PASSWORD="${POSTGRES_PASSWORD:-}"
socket_dir=/var/run/postgresql

if [ "$#" -eq 0 ] || [ "${1:0:1}" = "-" ]; then
	set -- postgres "$@"
fi
if [ "$1" != "postgres" ]; then
	exec "$@"
fi
shift

if [ "$(id -u)" = 0 ]; then
	mkdir -p "$PGDATA" "$socket_dir"
	chown -R postgres:postgres "$PGDATA" "$socket_dir"
	chmod 700 "$PGDATA"
	exec setpriv --reuid=postgres --regid=postgres --init-groups "$0" postgres "$@"
fi

if [ ! -s "$PGDATA/PG_VERSION" ]; then
	echo "docker-entrypoint: initializing $PGDATA for user $POSTGRES_USER"
	pwfile="$(mktemp)"
	printf '%s\n' "$POSTGRES_PASSWORD" >"$pwfile"
	auth=trust
	if [ -n "$POSTGRES_PASSWORD" ]; then
		auth=scram-sha-256
	fi
	initdb --username="$POSTGRES_USER" --pwfile="$pwfile" -E UTF8 --locale=C \
		--auth-local=trust --auth-host="$auth" --no-sync -D "$PGDATA"
	rm -f "$pwfile"
	printf '\nhost all all all %s\n' "$auth" >>"$PGDATA/pg_hba.conf"

	pg_ctl -D "$PGDATA" -w -o "-c listen_addresses='' -c unix_socket_directories=$socket_dir" start
	psql=(psql -v ON_ERROR_STOP=1 --no-psqlrc --username "$POSTGRES_USER" --host "$socket_dir")
	if [ "$POSTGRES_DB" != postgres ]; then
		"${psql[@]}" --dbname postgres --set db="$POSTGRES_DB" <<-'SQL'
			CREATE DATABASE :"db";
		SQL
	fi
	for f in /docker-entrypoint-initdb.d/*; do
		case "$f" in
		*.sh) echo "docker-entrypoint: running $f"; . "$f" ;;
		*.sql) echo "docker-entrypoint: running $f"; "${psql[@]}" --dbname "$POSTGRES_DB" -f "$f" ;;
		*) [ -e "$f" ] && echo "docker-entrypoint: ignoring $f" ;;
		esac
	done
	pg_ctl -D "$PGDATA" -m fast -w stop
	echo "docker-entrypoint: initialization complete; starting postgres"
fi

exec postgres -c listen_addresses='*' -c unix_socket_directories="$socket_dir" "$@"
ENTRYPOINT
chmod 755 "$dir/usr/local/bin/docker-entrypoint.sh"
mkdir -p "$dir/var/run/postgresql"
chroot "$dir" chown postgres:postgres /var/run/postgresql

say "importing the root filesystem as $name"
tar -C "$dir" --numeric-owner -c . | docker import \
	--change 'ENTRYPOINT ["/usr/local/bin/docker-entrypoint.sh"]' \
	--change 'CMD ["postgres"]' \
	--change "ENV PATH=/usr/lib/postgresql/$pg_major/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin" \
	--change 'ENV PGDATA=/var/lib/postgresql/data' \
	--change 'ENV LANG=C.UTF-8' \
	--change 'EXPOSE 5432' \
	- "$name" >/dev/null

say "built $name in $(($(date +%s) - start))s ($(docker image inspect --format '{{.Size}}' "$name" | awk '{printf "%.0f MB", $1/1e6}'))"
