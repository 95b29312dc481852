#!/usr/bin/env bash
# Runs every `chatroom bench` scenario once against a fresh server and
# database per scenario, writing one JSON report per scenario:
#
#   bench/suite.sh SERVER_BINARY OUT_DIR RUN [LOADER_BINARY]
#
# SERVER_BINARY is the `chatroom` under test; LOADER_BINARY (default: the
# same) runs `chatroom bench`, so two servers can be measured with one
# loader. bench/median.py turns the reports of several runs into a table.
#
#   CHATROOM_BENCH_PG=postgres://USER@HOST:PORT   run on PostgreSQL instead:
#       a fresh database (chatroom_bench) on that cluster per scenario
#   CHATROOM_BENCH_REPLICAS=2     with CHATROOM_BENCH_PG, serve from two
#       replicas of one database (on PORT and PORT+1), the loader's tokens
#       taken in turn between them (throughput scenarios only)
#   CHATROOM_BENCH_SCENARIOS="post_message whats_new"   a subset (default:
#       every scenario, idle memory and the 1,000-client ones included)
#   CHATROOM_BENCH_DURATION=5     seconds per throughput scenario
set -euo pipefail
server=$1 out=$2 run=$3 loader=${4:-$1}
port=${CHATROOM_BENCH_PORT:-18080}
pg=${CHATROOM_BENCH_PG:-}
replicas=${CHATROOM_BENCH_REPLICAS:-1}
duration=${CHATROOM_BENCH_DURATION:-5}
scenarios=${CHATROOM_BENCH_SCENARIOS:-baseline whoami post_message read_messages whats_new mixed claim_storm idle wait_wake sse_fanout}
work=$(mktemp -d)
pids=()
trap 'kill "${pids[@]}" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$out"
export CHATROOM_DB=$work/bench.db CHATROOM_RATE_LIMIT_PER_MINUTE=0 CHATROOM_MAX_STREAMS_PER_TOKEN=0 \
  CHATROOM_MAX_IN_FLIGHT=0 CHATROOM_MAX_CONNECTIONS_PER_IP=0 \
  CHATROOM_LOG=warn
if [ -n "$pg" ]; then
  export CHATROOM_DATABASE_URL=${pg%/}/chatroom_bench
  psql=(psql -q -v ON_ERROR_STOP=1 "${pg%/}/postgres")
fi

start() {
  if [ -n "$pg" ]; then
    "${psql[@]}" -c 'DROP DATABASE IF EXISTS chatroom_bench WITH (FORCE)' -c 'CREATE DATABASE chatroom_bench'
  else
    rm -f "$work"/bench.db*
  fi
  "$server" admin add-room bench >/dev/null
  for i in $(seq 1 32); do "$server" admin add-token --agent "a$i" --room bench; done 2>/dev/null \
    | grep -o 'cr_[A-Za-z0-9_-]*' >"$work/tokens"
  pids=()
  for r in $(seq 0 $(($1 - 1))); do
    CHATROOM_LISTEN=127.0.0.1:$((port + r)) "$server" serve >"$work/server.$r.log" 2>&1 &
    pids+=($!)
  done
  for r in $(seq 0 $(($1 - 1))); do
    up=""
    for _ in $(seq 100); do
      curl -sf "http://127.0.0.1:$((port + r))/healthz" >/dev/null && { up=1; break; }
      sleep 0.1
    done
    [ -n "$up" ] || { echo "the server did not start" >&2; cat "$work/server.$r.log" >&2; exit 1; }
  done
}
stop() { kill "${pids[@]}"; wait "${pids[@]}" 2>/dev/null || true; pids=(); }
rss() { awk -v k="$1:" '$1 == k {print $2}' "/proc/${pids[0]}/status"; }
bench() { # CONCURRENCY ARGS...: the tokens in turn over the replicas
  local urls=() conc=$1; shift
  for r in $(seq 0 $((${#pids[@]} - 1))); do urls+=(--url "http://127.0.0.1:$((port + r))"); done
  # shellcheck disable=SC2046
  "$loader" bench "${urls[@]}" $(sed 's/^/--token /' "$work/tokens") --json --no-baseline \
    --concurrency "$conc" "$@" 2>/dev/null
}

for s in $scenarios; do
  case $s in
    idle|wait_wake)
      start 1
      [ "$s" = idle ] && echo "{\"idle_rss_kb\": $(rss VmRSS)}" >"$out/idle.$run.json"
      if [ "$s" = wait_wake ]; then
        bench 1000 --scenario wait_wake >"$out/wait_wake.$run.json"
        echo "{\"peak_rss_1000_waiters_kb\": $(rss VmHWM)}" >"$out/rss1000.$run.json"
      fi
      stop ;;
    sse_fanout) start 1; bench 1000 --scenario sse_fanout >"$out/$s.$run.json"; stop ;;
    claim_storm) start "$replicas"; bench 32 --scenario claim_storm --tasks 1000 >"$out/$s.$run.json"; stop ;;
    *) start "$replicas"; bench 32 --scenario "$s" --duration "$duration" >"$out/$s.$run.json"; stop ;;
  esac
done
