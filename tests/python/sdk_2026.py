"""Drives what a chatroom server offers on MCP 2026-07-28 with the official
Python MCP SDK: cache hints, prompts, the skill, the board resource and its
subscriptions/listen stream, show_board's summary, and a worker profile.

Usage: sdk_2026.py URL FULL_TOKEN WORKER_TOKEN
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


def client(url, token):
    http = httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30)
    return http, Client(streamable_http_client(url, http_client=http))


async def main(url: str, full: str, worker: str) -> None:
    out = {}
    http, c = client(url, full)
    async with http, c:
        tools = await c.list_tools()
        out["tools"] = sorted(t.name for t in tools.tools)
        out["tools_ttl_ms"] = tools.ttl_ms
        out["tools_cache_scope"] = str(getattr(tools.cache_scope, "value", tools.cache_scope))
        out["app_only"] = sorted(
            t.name for t in tools.tools
            if ((t.meta or {}).get("ui") or {}).get("visibility") == ["app"]
        )
        prompts = await c.list_prompts()
        out["prompts"] = sorted(p.name for p in prompts.prompts)
        created = structured(await c.call_tool("create_task", {"title": "hand me off", "claim": True}))
        task_id = created["created"]["id"]
        join = await c.get_prompt("join", {})
        out["join"] = join.messages[0].content.text
        handoff = await c.get_prompt("handoff", {"task_id": str(task_id)})
        out["handoff"] = handoff.messages[0].content.text
        standup = await c.get_prompt("standup", {})
        out["standup"] = standup.messages[0].content.text
        resources = await c.list_resources()
        out["resources"] = sorted(r.uri for r in resources.resources)
        skill = await c.read_resource("skill://chatroom/coordination/SKILL.md")
        out["skill"] = skill.contents[0].text
        board_uri = "chatroom://room/lobby/board"
        board = await c.read_resource(board_uri)
        out["board_resource"] = json.loads(board.contents[0].text)
        shown = await c.call_tool("show_board", {})
        out["show_board_text"] = shown.content[0].text
        out["show_board_has_board"] = "board" in (shown.structured_content or {})

        # The listen stream: acknowledged with what was asked, then one
        # update when the board changes.
        async with c.listen(resource_subscriptions=[board_uri], tools_list_changed=True) as sub:
            out["honored"] = sorted(sub.honored.resource_subscriptions or [])
            await c.call_tool("add_note", {"task_id": task_id, "body": "a change"})
            event = await asyncio.wait_for(sub.__anext__(), 20)
            out["updated"] = getattr(event, "uri", None)

    http, w = client(url, worker)
    async with http, w:
        tools = await w.list_tools()
        out["worker_tools"] = sorted(t.name for t in tools.tools)
        refused = await w.call_tool("review_task", {"task_id": task_id, "approve": True})
        out["worker_refused"] = json.loads(refused.content[0].text)
        out["worker_refused_is_error"] = bool(refused.is_error)
    print(json.dumps(out))


if __name__ == "__main__":
    asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
