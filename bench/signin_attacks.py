"""The sign-in under attack: the figures of BENCHMARKS.md's "The sign-in under
hostile load" table. Runs against a server already started (see that section)
and prints one JSON object per scenario.

Usage: signin_attacks.py BASE_URL SERVER_PID DB_FILE TOKEN CONNECT_CODE SCENARIO
  SCENARIO: cimd  (700 sign-ins naming hosts whose DNS never answers)
            register (5,000 registrations from 175 IPv6 /64s, then a real one)
            refresh (one grant refreshing as fast as it can for 10 s)

Only the standard library; raw sockets, many at once.
"""

import asyncio
import json
import sqlite3
import sys
import time
import urllib.parse

BASE, PID, DB, TOKEN, CONNECT, SCENARIO = sys.argv[1:7]
HOST, PORT = urllib.parse.urlparse(BASE).hostname, urllib.parse.urlparse(BASE).port
REDIRECT = "http://127.0.0.1:53682/callback"
CHALLENGE = "E9Melhoa2OwvFrEMTJguCHaoeK1t8URWbuGJSstw-cM"
VERIFIER = "dBjftJeZ4CVP-mB92K27uhbUJU1p1r_wW1gFWFOEjXk"


def rss_mb():
    for line in open(f"/proc/{PID}/status"):
        if line.startswith("VmRSS:"):
            return round(int(line.split()[1]) / 1024, 1)


async def request(method, path, body=b"", headers=None, timeout=60):
    """One request on its own connection: (status, headers, body)."""
    r, w = await asyncio.open_connection(HOST, PORT)
    head = f"{method} {path} HTTP/1.1\r\nHost: {HOST}:{PORT}\r\nConnection: close\r\n"
    for k, v in (headers or {}).items():
        head += f"{k}: {v}\r\n"
    head += f"Content-Length: {len(body)}\r\n\r\n"
    w.write(head.encode() + body)
    await w.drain()
    try:
        raw = await asyncio.wait_for(r.read(), timeout)
    finally:
        w.close()
    head, _, rest = raw.partition(b"\r\n\r\n")
    lines = head.decode(errors="replace").split("\r\n")
    status = int(lines[0].split()[1]) if lines and len(lines[0].split()) > 1 else 0
    hdrs = {}
    for l in lines[1:]:
        k, _, v = l.partition(":")
        hdrs[k.strip().lower()] = v.strip()
    return status, hdrs, rest


def form(d):
    return urllib.parse.urlencode(d).encode()


FORM = {"Content-Type": "application/x-www-form-urlencoded"}


async def register(xff=None):
    h = {"Content-Type": "application/json"}
    if xff:
        h["X-Forwarded-For"] = xff
    body = json.dumps({"client_name": "bench", "redirect_uris": [REDIRECT],
                       "token_endpoint_auth_method": "none"}).encode()
    st, _, b = await request("POST", "/oauth/register", body, h)
    return st, (json.loads(b) if st == 201 else None)


def authorize_query(client_id):
    return urllib.parse.urlencode({
        "response_type": "code", "client_id": client_id, "redirect_uri": REDIRECT,
        "state": "s", "code_challenge": CHALLENGE, "code_challenge_method": "S256"})


async def real_sign_in():
    """Registration, the consent page, the connect code, the token: what a
    real app gets, and how long it took."""
    t0 = time.monotonic()
    st, reg = await register()
    if st != 201:
        return {"step": "register", "status": st, "s": round(time.monotonic() - t0, 2)}
    st, _, page = await request("GET", "/oauth/authorize?" + authorize_query(reg["client_id"]))
    if st != 200:
        return {"step": "page", "status": st, "s": round(time.monotonic() - t0, 2)}
    fields = {}
    for part in page.decode().split("<input")[1:]:
        if 'type="hidden"' in part:
            name = part.split('name="')[1].split('"')[0]
            value = part.split('value="')[1].split('"')[0] if 'value="' in part else ""
            fields[name] = value.replace("&#x2f;", "/").replace("&amp;", "&").replace("&#x3d;", "=")
    fields.update(connect_code=CONNECT, decision="approve")
    st, h, _ = await request("POST", "/oauth/authorize", form(fields), FORM)
    if st != 303:
        return {"step": "approve", "status": st, "s": round(time.monotonic() - t0, 2)}
    code = urllib.parse.parse_qs(urllib.parse.urlparse(h["location"]).query)["code"][0]
    st, _, b = await request("POST", "/oauth/token", form({
        "grant_type": "authorization_code", "code": code, "client_id": reg["client_id"],
        "redirect_uri": REDIRECT, "code_verifier": VERIFIER}), FORM)
    return {"step": "token", "status": st, "s": round(time.monotonic() - t0, 2),
            "tokens": json.loads(b) if st == 200 else None}


async def probe(stop, worst):
    """`GET /v1/rooms` every 100 ms while the attack runs; the slowest."""
    while not stop.is_set():
        t0 = time.monotonic()
        try:
            await request("GET", "/v1/rooms", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
        except Exception:
            pass
        worst.append(time.monotonic() - t0)
        await asyncio.sleep(0.1)


async def cimd():
    rss0 = rss_mb()
    stop, worst = asyncio.Event(), []
    p = asyncio.create_task(probe(stop, worst))

    async def one(i):
        q = authorize_query(f"https://h{i}.blackhole.example/client.json")
        try:
            return (await request("GET", "/oauth/authorize?" + q, timeout=90))[0]
        except Exception:
            return -1

    flood = [asyncio.create_task(one(i)) for i in range(700)]
    await asyncio.sleep(2)
    peak = rss_mb()
    real = await real_sign_in()
    statuses = await asyncio.gather(*flood)
    stop.set()
    await p
    return {"scenario": "cimd", "rss_before_mb": rss0, "rss_during_mb": peak, "rss_after_mb": rss_mb(),
            "rooms_worst_s": round(max(worst), 2), "real_sign_in": {k: v for k, v in real.items() if k != "tokens"},
            "flood_statuses": {str(s): statuses.count(s) for s in set(statuses)}}


async def registrations():
    rss0 = rss_mb()
    t0 = time.monotonic()
    sem = asyncio.Semaphore(64)

    async def one(i):
        async with sem:
            return (await register(f"2001:db8:{i % 175:x}:{i // 175:x}::1"))[0]

    statuses = await asyncio.gather(*[one(i) for i in range(5000)])
    took = time.monotonic() - t0
    real = await real_sign_in()
    return {"scenario": "register", "s": round(took, 1), "rss_before_mb": rss0, "rss_after_mb": rss_mb(),
            "statuses": {str(s): statuses.count(s) for s in set(statuses)},
            "real_sign_in": {k: v for k, v in real.items() if k != "tokens"}}


async def refresh_churn():
    real = await real_sign_in()
    tokens = real["tokens"]
    st, reg = None, None
    client_id = None
    # The client id the grant belongs to.
    con = sqlite3.connect(DB)
    client_id = con.execute("SELECT client_id FROM oauth_grants ORDER BY id DESC LIMIT 1").fetchone()[0]
    rows0 = con.execute("SELECT COUNT(*) FROM oauth_tokens").fetchone()[0]
    con.close()
    t0, n, refused = time.monotonic(), 0, 0
    refresh = tokens["refresh_token"]
    while time.monotonic() - t0 < 10:
        st, _, b = await request("POST", "/oauth/token", form({
            "grant_type": "refresh_token", "refresh_token": refresh, "client_id": client_id}), FORM)
        if st == 200:
            refresh = json.loads(b)["refresh_token"]
            n += 1
        else:
            refused += 1
    con = sqlite3.connect(DB)
    rows = con.execute("SELECT COUNT(*) FROM oauth_tokens").fetchone()[0]
    con.close()
    return {"scenario": "refresh", "refreshed": n, "refused": refused, "token_rows_added": rows - rows0}


print(json.dumps(asyncio.run({"cimd": cimd, "register": registrations, "refresh": refresh_churn}[SCENARIO]())))
