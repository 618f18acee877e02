#!/usr/bin/python3
"""test/ha/netproxy.py: TCP relays on loopback that stand in for network links,
so that test/ha/run.sh can cut one node off without touching the kernel's
packet filter.

    netproxy.py LISTEN_PORT:TARGET_PORT [LISTEN_PORT:TARGET_PORT ...]

relays every connection to 127.0.0.1:LISTEN_PORT to 127.0.0.1:TARGET_PORT.

SIGUSR1 cuts the links: from then on no byte is passed on in either direction,
and new connections are accepted but not relayed, as when packets are dropped:
the peers see timeouts, not resets. SIGUSR2 restores the links: what was held
back is delivered late, as TCP would retransmit it, and new connections are
relayed again. SIGTERM ends the relay.
"""

import asyncio
import signal
import sys

CHUNK = 65536


async def pump(reader, writer, link):
    """Copies one direction of a connection while the link is up."""
    try:
        while True:
            data = await reader.read(CHUNK)
            if not data:
                break
            await link.wait()
            writer.write(data)
            await writer.drain()
    except (ConnectionError, OSError):
        pass
    finally:
        writer.close()


def relay(target_port, link):
    async def handle(client_reader, client_writer):
        await link.wait()
        try:
            server_reader, server_writer = await asyncio.open_connection("127.0.0.1", target_port)
        except OSError:
            client_writer.close()
            return
        await asyncio.gather(pump(client_reader, server_writer, link),
                             pump(server_reader, client_writer, link))

    return handle


async def main(pairs):
    link = asyncio.Event()
    link.set()
    done = asyncio.Event()
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, link.clear)
    loop.add_signal_handler(signal.SIGUSR2, link.set)
    loop.add_signal_handler(signal.SIGTERM, done.set)
    loop.add_signal_handler(signal.SIGINT, done.set)
    servers = []
    for listen_port, target_port in pairs:
        servers.append(await asyncio.start_server(relay(target_port, link), "127.0.0.1", listen_port,
                                                  reuse_address=True))
    await done.wait()
    for server in servers:
        server.close()


def parse(argument):
    try:
        listen_port, target_port = (int(p) for p in argument.split(":"))
    except ValueError:
        sys.exit(f"netproxy: expected LISTEN_PORT:TARGET_PORT, got {argument!r}")
    return listen_port, target_port


if __name__ == "__main__":
    if len(sys.argv) < 2:
        sys.exit("usage: netproxy.py LISTEN_PORT:TARGET_PORT [LISTEN_PORT:TARGET_PORT ...]")
    asyncio.run(main([parse(a) for a in sys.argv[1:]]))
