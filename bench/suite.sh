#!/usr/bin/env bash
# Runs every `chatroom bench` scenario once against a fresh server and
# database per scenario, writing one JSON report per scenario:
#
#   bench/suite.sh SERVER_BINARY OUT_DIR RUN [LOADER_BINARY]
#
# SERVER_BINARY is the `chatroom` under test; LOADER_BINARY (default: the
# same) runs `chatroom bench`, so two servers can be measured with one
# loader. bench/median.py turns the reports of several runs into a table.
set -euo pipefail
server=$1 out=$2 run=$3 loader=${4:-$1}
port=${CHATROOM_BENCH_PORT:-18080}
work=$(mktemp -d)
trap 'kill "${pid:-}" 2>/dev/null || true; rm -rf "$work"' EXIT
mkdir -p "$out"
export CHATROOM_DB=$work/bench.db CHATROOM_RATE_LIMIT_PER_MINUTE=0 CHATROOM_MAX_STREAMS_PER_TOKEN=0 \
  CHATROOM_LISTEN=127.0.0.1:$port CHATROOM_LOG=warn

start() {
  rm -f "$work"/bench.db*
  "$server" admin add-room bench >/dev/null
  for i in $(seq 1 32); do "$server" admin add-token --agent "a$i" --room bench; done 2>/dev/null \
    | grep -o 'cr_[A-Za-z0-9_-]*' | sed 's/^/--token /' >"$work/tokens"
  "$server" serve >"$work/server.log" 2>&1 &
  pid=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$port/healthz" >/dev/null && return; sleep 0.1; done
  echo "the server did not start" >&2; exit 1
}
stop() { kill "$pid"; wait "$pid" 2>/dev/null || true; }
rss() { awk -v k="$1:" '$1 == k {print $2}' "/proc/$pid/status"; }
bench() {
  # shellcheck disable=SC2046
  "$loader" bench --url "http://127.0.0.1:$port" $(cat "$work/tokens") --json --no-baseline "$@" 2>/dev/null
}

for s in baseline whoami post_message read_messages whats_new mixed; do
  start; bench --scenario "$s" --concurrency 32 --duration 5 >"$out/$s.$run.json"; stop
done
start; bench --scenario claim_storm --concurrency 32 --tasks 1000 >"$out/claim_storm.$run.json"; stop
start
echo "{\"idle_rss_kb\": $(rss VmRSS)}" >"$out/idle.$run.json"
bench --scenario wait_wake --concurrency 1000 >"$out/wait_wake.$run.json"
echo "{\"peak_rss_1000_waiters_kb\": $(rss VmHWM)}" >"$out/rss1000.$run.json"
stop
start; bench --scenario sse_fanout --concurrency 1000 >"$out/sse_fanout.$run.json"; stop
