#!/usr/bin/env bash
# Make sure PostgreSQL's server programs (initdb, pg_ctl, postgres) are installed, from Debian's
# packages. Idempotent: does nothing when they are already there. The tests start a throwaway
# cluster of their own on a free loopback port; this script starts none.
set -euo pipefail

found() {
    compgen -G "/usr/lib/postgresql/*/bin/pg_ctl" >/dev/null || command -v pg_ctl >/dev/null
}

if found; then
    echo "ensure_postgres: server programs present"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "ensure_postgres: PostgreSQL is missing and installing it needs root" >&2
    exit 1
fi
# (Debian may also create a 'main' cluster on port 5432: unused, and harmless to the tests.)
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends postgresql >/dev/null
found || { echo "ensure_postgres: installed, but pg_ctl is still missing" >&2; exit 1; }
echo "ensure_postgres: installed $(ls -d /usr/lib/postgresql/*/bin | tail -n 1)"
