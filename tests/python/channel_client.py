"""Drives `chatroom channel` with the official Python MCP SDK's stdio client.

Usage: channel_client.py CHATROOM_BINARY URL TOKEN MODE  (MODE: legacy | auto)

Starts the channel as a stdio server (the SDK launches it), shakes hands,
prints one line `READY {json}` with the handshake, then waits for one line
on stdin (the test posts a mention meanwhile) and prints `NOTIFIED {json}`
with the first `notifications/claude/channel` it received (within 10 s).
"""

import asyncio
import json
import sys

import anyio
from pydantic import BaseModel, ConfigDict
from mcp import Client
from mcp.client.extension import ClientExtension, NotificationBinding
from mcp.client.stdio import StdioServerParameters


class ChannelParams(BaseModel):
    model_config = ConfigDict(extra="allow")
    content: str
    meta: dict[str, str]


class Channel(ClientExtension):
    """Observes Claude Code's channel notification, as the SDK lets a host."""

    identifier = "com.example/channel-observer"

    def __init__(self) -> None:
        self.received: asyncio.Queue[ChannelParams] = asyncio.Queue()

    def notifications(self):
        async def handler(params: ChannelParams) -> None:
            await self.received.put(params)

        return [NotificationBinding(method="notifications/claude/channel", params_type=ChannelParams, handler=handler)]


async def main(binary: str, url: str, token: str, mode: str) -> None:
    channel = Channel()
    server = StdioServerParameters(
        command=binary,
        args=["channel"],
        env={"CHATROOM_URL": url, "CHATROOM_TOKEN": token},
    )
    async with Client(server, mode=mode, extensions=[channel]) as client:
        init = client.session.initialize_result
        caps = init.capabilities.model_dump(mode="json", by_alias=True, exclude_none=True)
        print("READY " + json.dumps({
            "protocol": init.protocol_version,
            "server": init.server_info.name,
            "capabilities": caps,
            "instructions": init.instructions,
        }), flush=True)
        await anyio.to_thread.run_sync(sys.stdin.readline)
        got = await asyncio.wait_for(channel.received.get(), timeout=10)
        print("NOTIFIED " + json.dumps({"content": got.content, "meta": got.meta}), flush=True)


if __name__ == "__main__":
    asyncio.run(main(*sys.argv[1:5]))
