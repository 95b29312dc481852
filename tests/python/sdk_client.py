"""Drives a chatroom server with the official Python MCP SDK.

Usage: sdk_client.py URL TOKEN MODE  (MODE: auto | legacy)
Prints one JSON object with what the server answered.
"""

import asyncio
import json
import sys

import httpx2
from mcp import Client
from mcp.client.streamable_http import streamable_http_client


def structured(result):
    if getattr(result, "structured_content", None) is not None:
        return result.structured_content
    return json.loads(result.content[0].text)


async def main(url: str, token: str, mode: str) -> None:
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"})
    async with http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=mode) as client:
            tools = await client.list_tools()
            me = structured(await client.call_tool("whoami", {}))
            posted = structured(await client.call_tool("post_message", {"body": f"hello from python ({mode})"}))
            read = structured(await client.call_tool("read_messages", {"since_id": 0}))
            refused = await client.call_tool("post_message", {"body": ""})
            print(json.dumps({
                "tools": sorted(t.name for t in tools.tools),
                "whoami": me,
                "posted": posted,
                "messages": read["messages"],
                "refused_is_error": bool(refused.is_error),
                "refused": json.loads(refused.content[0].text),
            }))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
