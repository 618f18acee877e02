#!/usr/bin/env python3
"""test/queue/proxy.py LISTEN_PORT TARGET_PORT: a TCP proxy on 127.0.0.1 that
the queue test freezes and drops (test/queue/run.sh).

SIGUSR1 freezes it: it stops reading and forwarding, but its sockets stay
open, so the kernel still acknowledges the server's packets (and keepalive
probes): to the server, the client is slow, not gone.
SIGUSR2 drops the connections to the server without closing them: each socket
is put in TCP repair mode (CAP_NET_ADMIN) and closed, which sends neither FIN
nor RST; the server learns of it only when it next sends something (a
keepalive probe), which the kernel answers with RST. The connections to the
clients are left open and unread.
"""
import selectors
import signal
import socket
import sys

TCP_REPAIR = 19  # linux/tcp.h

listen_port, target_port = int(sys.argv[1]), int(sys.argv[2])
selector = selectors.DefaultSelector()
pairs = {}        # socket -> its peer
upstream = set()  # the sockets connected to the server
frozen = False


def freeze(*_):
    global frozen
    frozen = True
    for sock in list(pairs):
        try:
            selector.unregister(sock)
        except (KeyError, ValueError):
            pass


def drop(*_):
    freeze()
    for sock in list(upstream):
        sock.setsockopt(socket.IPPROTO_TCP, TCP_REPAIR, 1)
        sock.close()
    upstream.clear()


signal.signal(signal.SIGUSR1, freeze)
signal.signal(signal.SIGUSR2, drop)

listener = socket.socket()
listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
listener.bind(("127.0.0.1", listen_port))
listener.listen(64)
selector.register(listener, selectors.EVENT_READ)
print("listening", flush=True)

while True:
    try:
        events = selector.select()
    except InterruptedError:
        continue
    for key, _ in events:
        sock = key.fileobj
        if sock is listener:
            client, _ = listener.accept()
            if frozen:
                continue
            server = socket.create_connection(("127.0.0.1", target_port))
            pairs[client], pairs[server] = server, client
            upstream.add(server)
            selector.register(client, selectors.EVENT_READ)
            selector.register(server, selectors.EVENT_READ)
            continue
        if frozen or sock not in pairs:
            continue
        peer = pairs[sock]
        try:
            data = sock.recv(65536)
        except OSError:
            data = b""
        if data:
            peer.sendall(data)
            continue
        for end in (sock, peer):
            selector.unregister(end)
            upstream.discard(end)
            pairs.pop(end, None)
            end.close()
