"""Signs in to a chatroom server with the official Python MCP SDK's OAuth
client (`mcp.client.auth.OAuthClientProvider`) and uses it.

Usage: oauth_client.py MCP_URL CONNECT_CODE AUTH_METHOD  (AUTH_METHOD: none | default)

The SDK discovers, registers and exchanges by itself; the "browser" here is
a plain HTTP client that opens the consent page, fills in the connect code
and approves, as a person would. Then the script calls tools, lets the
access token lapse so the SDK refreshes, and calls again. Prints one JSON
object with what happened (tokens included, so the caller can check they
are stored nowhere in the clear).
"""

import asyncio
import html.parser
import json
import sys
import time
from urllib.parse import parse_qs, urlparse

import httpx2
from mcp import Client
from mcp.client.auth import AuthorizationCodeResult, OAuthClientProvider, TokenStorage
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientInformationFull, OAuthClientMetadata, OAuthToken

REDIRECT = "http://127.0.0.1:53682/callback"


class Memory(TokenStorage):
    def __init__(self):
        self.tokens = None
        self.client = None
        self.history = []

    async def get_tokens(self):
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken):
        self.tokens = tokens
        self.history.append({"access_token": tokens.access_token, "refresh_token": tokens.refresh_token,
                             "expires_in": tokens.expires_in, "scope": tokens.scope,
                             "token_type": tokens.token_type})

    async def get_client_info(self):
        return self.client

    async def set_client_info(self, info: OAuthClientInformationFull):
        self.client = info


class Form(html.parser.HTMLParser):
    """The consent page's form fields and the app name it shows."""

    def __init__(self):
        super().__init__()
        self.fields = {}
        self.action = None
        self.in_name = False
        self.client_name = ""

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.action = a.get("action")
        if tag == "input" and a.get("type") == "hidden":
            self.fields[a["name"]] = a.get("value", "")
        if a.get("id") == "client-name":
            self.in_name = True

    def handle_endtag(self, tag):
        self.in_name = False

    def handle_data(self, data):
        if self.in_name:
            self.client_name += data


class Browser:
    """Answers the consent page over HTTP, as a person in a browser would."""

    def __init__(self, code: str):
        self.code = code
        self.result = None
        self.page = {}

    async def open(self, url: str):
        async with httpx2.AsyncClient(follow_redirects=False) as http:
            page = await http.get(url)
            assert page.status_code == 200, f"consent page: HTTP {page.status_code}: {page.text}"
            self.page = {
                "csp": page.headers.get("content-security-policy", ""),
                "x_frame_options": page.headers.get("x-frame-options", ""),
            }
            form = Form()
            form.feed(page.text)
            self.page["client_name"] = form.client_name
            self.page["has_csrf"] = bool(form.fields.get("csrf"))
            target = httpx2.URL(url).join(form.action)
            data = dict(form.fields, connect_code=self.code, decision="approve")
            answer = await http.post(target, data=data)
            assert answer.status_code in (302, 303), f"approve: HTTP {answer.status_code}: {answer.text}"
            location = answer.headers["location"]
            assert location.startswith(REDIRECT), location
            q = parse_qs(urlparse(location).query)
            self.result = AuthorizationCodeResult(code=q["code"][0], state=q.get("state", [None])[0],
                                                  iss=q.get("iss", [None])[0])

    async def callback(self):
        return self.result


def structured(result):
    if getattr(result, "structured_content", None) is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


async def main(url: str, code: str, method: str) -> None:
    storage = Memory()
    browser = Browser(code)
    metadata = OAuthClientMetadata(
        client_name="Python SDK test app",
        redirect_uris=[REDIRECT],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none" if method == "none" else None,
    )
    auth = OAuthClientProvider(url, metadata, storage, redirect_handler=browser.open,
                               callback_handler=browser.callback)
    out = {}
    async with httpx2.AsyncClient(auth=auth) as http:
        async with Client(streamable_http_client(url, http_client=http)) as client:
            out["whoami"] = structured(await client.call_tool("whoami", {}))
            out["posted"] = structured(await client.call_tool("post_message", {"body": "hello over OAuth"}))
            # Let the access token lapse on the client's clock: the SDK refreshes.
            auth.context.token_expiry_time = time.time() - 1
            out["whoami_after_refresh"] = structured(await client.call_tool("whoami", {}))
    out["tokens"] = storage.history
    out["client_id"] = storage.client.client_id if storage.client else None
    out["client_secret"] = storage.client.client_secret if storage.client else None
    out["auth_method"] = storage.client.token_endpoint_auth_method if storage.client else None
    out["page"] = browser.page
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
