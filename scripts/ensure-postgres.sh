#!/usr/bin/env bash
# ensure-postgres.sh — make sure a local PostgreSQL holds the gpulab test database; print its URL.
#
# Why: the ledger's invariant (a slice held by at most one open allocation) is enforced by the
# database, and must be tested on PostgreSQL as well as SQLite. Sessions and CI start with the
# Debian PostgreSQL 15 cluster stopped.
# What: creates the cluster 15/main if absent, starts it if down, waits until it accepts
# connections, creates role gpulab (password gpulab, CREATEDB) and database gpulab_test (owned by
# gpulab) if missing, checks a password login over TCP, and prints on stdout exactly one line:
#   postgresql+psycopg://gpulab:gpulab@127.0.0.1:5432/gpulab_test
# (use it as GPULAB_TEST_POSTGRES_URL). Idempotent; everything else goes to stderr only on failure.
set -euo pipefail

VER=15
CLUSTER=main
PORT=5432
ROLE=gpulab
PASSWORD=gpulab
DB=${GPULAB_TEST_PG_DB:-gpulab_test}  # one database per checkout when several run at once

die() { echo "ensure-postgres: $*" >&2; exit 1; }
as_pg() { (cd / && runuser -u postgres -- "$@"); }  # cd: postgres may not read $PWD
psql_pg() { as_pg psql -X -q -v ON_ERROR_STOP=1 -p "$PORT" -d postgres "$@"; }

command -v pg_ctlcluster >/dev/null 2>&1 \
    || die "pg_ctlcluster missing; install it: apt-get install -y postgresql-$VER"
[ "$(id -u)" = 0 ] || die "needs root (runs pg_ctlcluster and psql as user postgres)"

status=$(pg_lsclusters -h 2>/dev/null | awk -v v="$VER" -v c="$CLUSTER" '$1==v && $2==c {print $4}')
if [ -z "$status" ]; then
    pg_createcluster "$VER" "$CLUSTER" --port "$PORT" >/tmp/gpulab-pg-create.log 2>&1 \
        || die "pg_createcluster $VER $CLUSTER failed; see /tmp/gpulab-pg-create.log"
    status=down
fi
actual_port=$(pg_lsclusters -h | awk -v v="$VER" -v c="$CLUSTER" '$1==v && $2==c {print $3}')
[ "$actual_port" = "$PORT" ] \
    || die "cluster $VER/$CLUSTER listens on port $actual_port, expected $PORT"
if [ "$status" != online ]; then
    pg_ctlcluster "$VER" "$CLUSTER" start >/tmp/gpulab-pg-start.log 2>&1 \
        || die "pg_ctlcluster $VER $CLUSTER start failed; see /tmp/gpulab-pg-start.log and /var/log/postgresql/postgresql-$VER-$CLUSTER.log"
fi

for _ in $(seq 1 30); do
    pg_isready -q -h 127.0.0.1 -p "$PORT" && break
    sleep 1
done
pg_isready -q -h 127.0.0.1 -p "$PORT" || die "PostgreSQL $VER/$CLUSTER does not accept connections on 127.0.0.1:$PORT"

if [ -z "$(psql_pg -tAc "SELECT 1 FROM pg_roles WHERE rolname = '$ROLE'")" ]; then
    psql_pg -c "CREATE ROLE $ROLE LOGIN CREATEDB PASSWORD '$PASSWORD'"
fi
if [ -z "$(psql_pg -tAc "SELECT 1 FROM pg_database WHERE datname = '$DB'")" ]; then
    psql_pg -c "CREATE DATABASE $DB OWNER $ROLE"
fi

# The URL is only useful if a password login over TCP works (pg_hba, password, ownership).
PGPASSWORD=$PASSWORD psql -X -q -h 127.0.0.1 -p "$PORT" -U "$ROLE" -d "$DB" -tAc 'SELECT 1' >/dev/null \
    || die "cannot log in as $ROLE to $DB over TCP; check /etc/postgresql/$VER/$CLUSTER/pg_hba.conf"

echo "postgresql+psycopg://$ROLE:$PASSWORD@127.0.0.1:$PORT/$DB"
