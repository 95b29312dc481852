#!/usr/bin/env bash
# Writes link/startup.order: the functions a server runs from start to
# idle, which build.rs hands to the linker so that they lie side by side in
# the executable (see BENCHMARKS.md, "Idle memory").
#
#   bench/startup-order.sh BINARY [BINARY ...]
#
# Each BINARY is a release build of `chatroom`, with symbols (not stripped).
# Each is run under valgrind's callgrind: a fresh database, `serve` on a free
# loopback port, one /healthz and an agent's first calls over MCP
# (`initialize`, `tools/list`, `whoami`, `post_message`, `read_messages`,
# `whats_new`), then IDLE seconds of rest (the idle workers' ticks fall in
# it) and a shutdown. The functions it ran that the binary defines go into the file;
# with several binaries, the union. The list kept in the repository is
# that of two: `cargo build --release`'s, and the Docker image's, whose
# symbol names differ by its flags and features; the image strips its
# binary, so take it from a build of the Dockerfile without `install -s`:
#
#   sed 's/install -s /install /' Dockerfile | docker build -f - -t chatroom-syms .
#   docker cp "$(docker create chatroom-syms)":/usr/local/bin/chatroom /tmp/image-chatroom
#   bench/startup-order.sh target/release/chatroom /tmp/image-chatroom
#
# Run it again when start-up changes: a function missing from the file
# still works, it just lies elsewhere, and the resident pages grow back a
# little.
#
#   IDLE=20                 seconds of rest before the shutdown
#   OUT=link/startup.order  where the list goes
#
# Needs valgrind (Debian: apt-get install valgrind), curl and nm.
set -euo pipefail
export LC_ALL=C
[ $# -ge 1 ] || { sed -n '2,/^# Needs/p' "$0" | sed 's/^# \{0,1\}//'; exit 2; }
here=$(cd "$(dirname "$0")/.." && pwd)
idle=${IDLE:-20}
out=${OUT:-$here/link/startup.order}
command -v valgrind >/dev/null || { echo "startup-order: valgrind is needed (apt-get install valgrind)" >&2; exit 1; }
work=$(mktemp -d)
pid=""
trap '[ -n "$pid" ] && kill "$pid" 2>/dev/null; rm -rf "$work"' EXIT

n=0
for bin in "$@"; do
  n=$((n + 1))
  nm --defined-only "$bin" | awk '$2 ~ /^[tTwW]$/ { print $3 }' | sort -u >"$work/defined.$n"
  [ -s "$work/defined.$n" ] || { echo "startup-order: $bin has no symbols (stripped?)" >&2; exit 1; }
  db=$work/db.$n
  for v in $(env | grep -o '^CHATROOM_[A-Z_]*' || true); do unset "$v"; done
  CHATROOM_DB=$db "$bin" admin init >/dev/null 2>&1
  CHATROOM_DB=$db "$bin" admin add-room order >/dev/null 2>&1
  token=$(CHATROOM_DB=$db "$bin" admin add-token --agent orderer --room order 2>/dev/null |
    grep -oE 'cr_[A-Za-z0-9_-]{16,}' | head -n 1)
  port=$((20000 + RANDOM % 30000))
  CHATROOM_DB=$db CHATROOM_LISTEN=127.0.0.1:$port CHATROOM_LOG=warn \
    valgrind --tool=callgrind --demangle=no --dump-instr=no \
    --callgrind-out-file="$work/callgrind.$n" "$bin" serve >"$work/log.$n" 2>&1 &
  pid=$!
  up=""
  for _ in $(seq 1 600); do
    if curl -fsS -o /dev/null "http://127.0.0.1:$port/healthz" 2>/dev/null; then up=1; break; fi
    kill -0 "$pid" 2>/dev/null || break
    sleep 0.2
  done
  [ -n "$up" ] || { cat "$work/log.$n" >&2; echo "startup-order: $bin did not start" >&2; exit 1; }
  mcp() {
    curl -fsS -o /dev/null "http://127.0.0.1:$port/mcp" -H "Authorization: Bearer $token" \
      -H 'Content-Type: application/json' -H 'Accept: application/json, text/event-stream' \
      -H 'MCP-Protocol-Version: 2025-06-18' -d "$1"
  }
  mcp '{"jsonrpc":"2.0","id":1,"method":"initialize","params":{"protocolVersion":"2025-06-18","capabilities":{},"clientInfo":{"name":"startup-order","version":"1"}}}'
  mcp '{"jsonrpc":"2.0","id":2,"method":"tools/list"}'
  n_call=2
  for call in '"whoami","arguments":{}' '"post_message","arguments":{"body":"hello"}' \
    '"read_messages","arguments":{}' '"whats_new","arguments":{}'; do
    n_call=$((n_call + 1))
    mcp '{"jsonrpc":"2.0","id":'"$n_call"',"method":"tools/call","params":{"name":'"$call"'}}'
  done
  sleep "$idle"
  kill -INT "$pid"
  wait "$pid" || true
  pid=""
  # callgrind names each function once as `fn=(id) name` or `cfn=(id) name`.
  sed -nE 's/^c?fn=\([0-9]+\) (.*)$/\1/p' "$work/callgrind.$n" | sort -u |
    comm -12 - "$work/defined.$n" >"$work/ran.$n"
  echo "startup-order: $bin ran $(wc -l <"$work/ran.$n") of its $(wc -l <"$work/defined.$n") functions" >&2
done
mkdir -p "$(dirname "$out")"
sort -u "$work"/ran.* >"$out"
echo "startup-order: $(wc -l <"$out") functions in $out" >&2
