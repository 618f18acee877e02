#!/usr/bin/env python3
"""A TCP proxy between a watcher and the server's Unix socket that the test
partitions (test/watch/run.sh).

    proxy.py LISTEN_PORT SOCKET_PATH

Signals:
  SIGUSR1  partition: nothing moves in either direction any more, on the open
           connections or on new ones (their bytes wait, as packets that are
           dropped and resent would); no connection is closed or reset.
  SIGHUP   heal: everything moves again, on the same connections.
  SIGUSR2  heal, but every connection opened before the heal is broken
           (reset), as after a partition that outlived its peers' timeouts;
           new connections work.
Prints "listening" once it accepts connections.
"""
import asyncio
import signal
import socket
import sys


class Proxy:
    def __init__(self, socket_path):
        self.socket_path = socket_path
        self.flowing = asyncio.Event()
        self.flowing.set()
        self.pairs = []

    async def pump(self, reader, writer, pair):
        try:
            while True:
                data = await reader.read(65536)
                if not data:
                    break
                await self.flowing.wait()
                if pair["broken"]:
                    break
                writer.write(data)
                await writer.drain()
        except (ConnectionError, OSError):
            pass
        finally:
            self.close(pair)

    def close(self, pair, reset=False):
        for w in pair["writers"]:
            if reset:
                sock = w.get_extra_info("socket")
                if sock is not None and sock.family == socket.AF_INET:
                    # SO_LINGER 0: the client sees a reset, not an orderly close.
                    try:
                        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, b"\x01\x00\x00\x00\x00\x00\x00\x00")
                    except OSError:
                        pass  # closed already
                w.transport.abort()
            else:
                w.close()

    async def accept(self, client_reader, client_writer):
        try:
            server_reader, server_writer = await asyncio.open_unix_connection(self.socket_path)
        except OSError:
            client_writer.transport.abort()
            return
        pair = {"broken": False, "writers": (client_writer, server_writer)}
        self.pairs.append(pair)
        await asyncio.gather(self.pump(client_reader, server_writer, pair),
                             self.pump(server_reader, client_writer, pair))

    def partition(self):
        self.flowing.clear()
        print("partitioned", flush=True)

    def heal(self, break_connections):
        if break_connections:
            for pair in self.pairs:
                if not pair["broken"]:
                    pair["broken"] = True
                    self.close(pair, reset=True)
            self.pairs = []
        self.flowing.set()
        print("healed", "breaking" if break_connections else "resuming", flush=True)


async def main():
    port, socket_path = int(sys.argv[1]), sys.argv[2]
    proxy = Proxy(socket_path)
    loop = asyncio.get_running_loop()
    loop.add_signal_handler(signal.SIGUSR1, proxy.partition)
    loop.add_signal_handler(signal.SIGHUP, proxy.heal, False)
    loop.add_signal_handler(signal.SIGUSR2, proxy.heal, True)
    server = await asyncio.start_server(proxy.accept, "127.0.0.1", port)
    print("listening", flush=True)
    async with server:
        await server.serve_forever()


asyncio.run(main())
