#!/usr/bin/env bash
# Recorded histories of the board and the chat under faults, checked for
# linearizability (docs/GUARANTEES.md says what is promised and how).
#
#   tests/history/run.sh [--minutes M | --seconds S] [--backend sqlite|postgres|both]
#                        [--seed N] [--clients N] [--broken]
#
# For each backend: real `chatroom serve` processes (one on SQLite; three
# replicas on one PostgreSQL database, a private cluster this script starts
# on a free loopback port), 16 clients for M minutes (in histories of at most
# five minutes each), faults injected while they run (SIGKILL and restart of
# a server or replica, PostgreSQL restarted under the replicas, the network
# between a replica and PostgreSQL cut and healed, an agent paused with
# SIGSTOP until its lease runs out), then the checker (Go, in checker/) on
# every history. Exits 0 only when every history checks; the last line is
# `HISTORY: N operations, F faults, V violations`. The histories and, for a
# violation, an HTML timeline are kept in $CHATROOM_HISTORY_OUT (default: a
# new folder under /tmp), which the script names.
#
# --broken runs a build made with the test-only feature `history-fault` and
# CHATROOM_HISTORY_FAULT=unguarded-claim (claims written without their
# version guard): the checker must find violations, and the script fails.
set -euo pipefail
cd "$(dirname "$0")/../.."

seconds=60
backend=both
seed=1
clients=16
broken=0
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) seconds=$(( $2 * 60 )); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    --backend) backend=$2; shift 2 ;;
    --seed) seed=$2; shift 2 ;;
    --clients) clients=$2; shift 2 ;;
    --broken) broken=1; shift ;;
    *) echo "unknown argument: $1" >&2; exit 2 ;;
  esac
done
case "$backend" in
  sqlite) backends=(sqlite) ;;
  postgres) backends=(postgres) ;;
  both) backends=(sqlite postgres) ;;
  *) echo "--backend sqlite|postgres|both" >&2; exit 2 ;;
esac

ops=0
faults=0
violations=0
failed=0
summary() {
  local rc=$?
  [ "$failed" = 0 ] || echo "history: a run failed before it could be checked (see above)"
  # A run cut short (a failure, or a signal such as a CI timeout) must not
  # end on a line that reads like a clean result.
  if [ "$rc" != 0 ] && [ "$violations" = 0 ]; then
    echo "HISTORY: $ops operations, $faults faults, $violations violations, INCOMPLETE (exit $rc)"
  else
    echo "HISTORY: $ops operations, $faults faults, $violations violations"
  fi
}
trap summary EXIT
trap 'exit 143' TERM INT

OUT="${CHATROOM_HISTORY_OUT:-$(mktemp -d /tmp/chatroom-history.XXXXXX)}"
mkdir -p "$OUT"
echo "history: files in $OUT"

export CARGO_TARGET_DIR="${CARGO_TARGET_DIR:-$HOME/.cache/chatroom/target}"
export CARGO_TERM_COLOR=never
bin="$CARGO_TARGET_DIR/debug/chatroom"
if [ "$broken" = 1 ]; then
  cargo build --quiet --features history-fault --bin chatroom
  cp "$bin" "$OUT/chatroom-history-fault"
  bin="$OUT/chatroom-history-fault"
  export CHATROOM_HISTORY_FAULT=unguarded-claim
  cargo build --quiet --example history_driver
else
  # One build for both: the binary with the same features as the tests'
  # build (dev-dependencies unified), so that CI compiles nothing again.
  cargo build --quiet --bin chatroom --example history_driver
fi
driver="$CARGO_TARGET_DIR/debug/examples/history_driver"
(cd tests/history/checker && go build -o "$OUT/checker" .)

# ---- a private PostgreSQL cluster, restartable by the pg-restart fault ----
PG_DIR=""
pg_stop() {
  [ -n "$PG_DIR" ] || return 0
  as_postgres "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -m immediate stop >/dev/null 2>&1 || true
  rm -rf "$PG_DIR"
}
as_postgres() {
  if [ "$(id -u)" = 0 ]; then runuser -u postgres -- "$@"; else "$@"; fi
}
if [[ " ${backends[*]} " == *" postgres "* ]]; then
  PG_BIN=""
  for d in /usr/lib/postgresql/15/bin /usr/lib/postgresql/*/bin; do
    if [ -x "$d/initdb" ] && [ -x "$d/pg_ctl" ]; then PG_BIN="$d"; break; fi
  done
  [ -n "$PG_BIN" ] || { echo "PostgreSQL's initdb/pg_ctl not found"; failed=1; exit 1; }
  PG_PORT="$(python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"
  PG_DIR="$(mktemp -d /tmp/chatroom-history-pg.XXXXXX)"
  if [ "$(id -u)" = 0 ]; then chown postgres "$PG_DIR"; fi
  trap 'rc=$?; pg_stop; (exit $rc); summary' EXIT
  as_postgres "$PG_BIN/initdb" -D "$PG_DIR/data" -U postgres -A trust -E UTF8 --locale=C.UTF-8 --no-sync >/dev/null
  as_postgres "$PG_BIN/pg_ctl" -D "$PG_DIR/data" -l "$PG_DIR/server.log" -w -t 60 \
    -o "-c listen_addresses=127.0.0.1 -p $PG_PORT -c unix_socket_directories=$PG_DIR -c max_connections=300 -c fsync=off" \
    start >/dev/null
  PG_URL="postgres://postgres@127.0.0.1:$PG_PORT/postgres"
  if [ "$(id -u)" = 0 ]; then
    PG_RESTART="runuser -u postgres -- $PG_BIN/pg_ctl -D $PG_DIR/data -l $PG_DIR/server.log -m immediate -w -t 60 restart"
  else
    PG_RESTART="$PG_BIN/pg_ctl -D $PG_DIR/data -l $PG_DIR/server.log -m immediate -w -t 60 restart"
  fi
fi

# ---- the histories: at most five minutes each, then checked -------------
segment=300
for b in "${backends[@]}"; do
  left=$seconds
  n=0
  while [ "$left" -gt 0 ]; do
    s=$(( left < segment ? left : segment ))
    left=$(( left - s ))
    n=$((n + 1))
    run_seed=$(( seed * 1000 + n ))
    hist="$OUT/$b-$run_seed.jsonl"
    echo "== history: $b, $s s, seed $run_seed, $clients clients"
    args=(run --backend "$b" --seconds "$s" --seed "$run_seed" --clients "$clients"
          --out "$hist" --bin "$bin" --dir "$OUT/$b-$run_seed")
    if [ "$b" = postgres ]; then
      args+=(--pg-url "$PG_URL" --pg-restart "$PG_RESTART" --replicas 3)
    fi
    if ! "$driver" "${args[@]}" 2> "$OUT/$b-$run_seed.driver.log"; then
      tail -20 "$OUT/$b-$run_seed.driver.log"
      failed=1
      exit 1
    fi
    set +e
    result="$("$OUT/checker" -html "$OUT/violations" "$hist")"
    rc=$?
    set -e
    echo "$result"
    line="$(echo "$result" | grep '^checker:' | tail -1)"
    [ -n "$line" ] || { failed=1; exit 1; }
    read -r o f v <<<"$(echo "$line" | sed -E 's/^checker: ([0-9]+) operations, ([0-9]+) faults, ([0-9]+) violations$/\1 \2 \3/')"
    ops=$((ops + o)); faults=$((faults + f)); violations=$((violations + v))
    if [ "$rc" -gt 1 ]; then failed=1; exit 1; fi
  done
done
if [ "$violations" -gt 0 ]; then
  echo "history: violations; timelines in $OUT/violations"
  exit 1
fi
