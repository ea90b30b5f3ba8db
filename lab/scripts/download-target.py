"""A tunnel target for the hostile scripts: every connection gets 64 MiB
(1,024 chunks of 64 KiB, 0x5a), then a close. The send buffer is pinned at
64 KiB a connection: thousands of stalled connections with autotuned
buffers take the host past tcp_mem, and the kernel then resets connections
closed with bytes unsent.

    python3 download-target.py PORT
"""
import asyncio
import socket
import sys

CHUNK = b"\x5a" * 65536


async def handle(r, w):
    try:
        w.get_extra_info("socket").setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 65536)
        for _ in range(1024):
            w.write(CHUNK)
            await w.drain()
        w.close()
    except Exception:
        pass


async def main():
    srv = await asyncio.start_server(handle, "127.0.0.1", int(sys.argv[1]), backlog=4096)
    async with srv:
        await srv.serve_forever()


asyncio.run(main())
