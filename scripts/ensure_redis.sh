#!/usr/bin/env bash
# Make sure Redis's server program (redis-server) is installed, from Debian's packages.
# Idempotent: does nothing when it is already there. The tests start a throwaway server of their
# own on a free loopback port; this script starts none.
set -euo pipefail

if command -v redis-server >/dev/null; then
    echo "ensure_redis: server program present"
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "ensure_redis: Redis is missing and installing it needs root" >&2
    exit 1
fi
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends redis-server >/dev/null
command -v redis-server >/dev/null || { echo "ensure_redis: installed, but redis-server is still missing" >&2; exit 1; }
echo "ensure_redis: installed $(redis-server --version | head -n 1)"
