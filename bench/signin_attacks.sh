#!/usr/bin/env bash
# Runs bench/signin_attacks.py against a chatroom binary, each scenario on
# a fresh SQLite file, the server in a mount namespace whose resolv.conf
# points at a DNS server that never answers (so "hosts whose DNS never
# answers" is real, whatever the machine's own DNS does).
# Usage: bench/signin_attacks.sh path/to/chatroom [scenario ...]
set -euo pipefail
BIN=$(realpath "$1"); shift
SCENARIOS=${*:-cimd register refresh}
HERE=$(cd "$(dirname "$0")" && pwd)
WORK=$(mktemp -d)
trap 'kill $(jobs -p) 2>/dev/null || true; rm -rf "$WORK"' EXIT
echo "nameserver 127.0.0.77" > "$WORK/resolv.conf"
python3 -c '
import socket
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.77", 53))
while True:
    s.recvfrom(4096)  # never answer
' &
PORT=18765
for scenario in $SCENARIOS; do
  export CHATROOM_DB="$WORK/$scenario.db" CHATROOM_LISTEN="127.0.0.1:$PORT" CHATROOM_RATE_LIMIT_PER_MINUTE=0 \
    CHATROOM_TRUST_PROXY=on CHATROOM_LOG=warn
  "$BIN" admin add-room lobby >/dev/null 2>&1
  TOKEN=$("$BIN" admin add-token --agent alice --room lobby 2>/dev/null | grep -o 'cr_[A-Za-z0-9_-]*' | head -1)
  CODE=$("$BIN" admin connect --agent phone --room lobby --ttl-minutes 60 2>/dev/null | grep -o 'crc-[a-z0-9-]*' | head -1)
  unshare -m sh -c "mount --bind '$WORK/resolv.conf' /etc/resolv.conf && exec '$BIN' serve" 2>"$WORK/$scenario.log" &
  SERVER=$!
  for _ in $(seq 100); do curl -sf "http://127.0.0.1:$PORT/healthz" >/dev/null && break; sleep 0.1; done
  PID=$(pgrep -P "$SERVER" || echo "$SERVER")
  python3 "$HERE/signin_attacks.py" "http://127.0.0.1:$PORT" "$PID" "$CHATROOM_DB" "$TOKEN" "$CODE" "$scenario"
  kill "$SERVER" 2>/dev/null; wait "$SERVER" 2>/dev/null || true
  PORT=$((PORT + 1))
done
