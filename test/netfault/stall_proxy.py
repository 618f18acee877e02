#!/usr/bin/python3
"""A userspace TCP relay that test/netfault/run.sh can stall.

stall_proxy.py LISTEN_HOST LISTEN_PORT TARGET_HOST TARGET_PORT

Relays every connection accepted on LISTEN_HOST:LISTEN_PORT to
TARGET_HOST:TARGET_PORT, byte for byte. The test stalls it with SIGSTOP and
lets it go on with SIGCONT: while it is stopped its sockets stay open and the
kernel keeps acknowledging them (TCP keepalive probes included), but no byte
moves either way. That is a half-open connection as a client sees it behind a
hung proxy or pooler: both TCP ends look alive, nothing gets through.
"""
import socket
import sys
import threading


def pump(source: socket.socket, sink: socket.socket) -> None:
    try:
        while True:
            data = source.recv(65536)
            if not data:
                break
            sink.sendall(data)
    except OSError:
        pass
    finally:
        for s in (source, sink):
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


def main() -> None:
    listen_host, listen_port, target_host, target_port = sys.argv[1], int(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    server = socket.socket()
    server.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    server.bind((listen_host, listen_port))
    server.listen(64)
    print("listening", flush=True)
    while True:
        client, _ = server.accept()
        upstream = socket.create_connection((target_host, target_port))
        for a, b in ((client, upstream), (upstream, client)):
            threading.Thread(target=pump, args=(a, b), daemon=True).start()


if __name__ == "__main__":
    main()
