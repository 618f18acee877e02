"""A client helper's lease holder for test/netfault/run.sh (Python).

Holds NF_NAME (TTL NF_TTL_MS) over NF_CONNINFO, writes one fenced row and
prints "held TOKEN"; when the helper signals the loss, prints "lost MS" (the
wall clock, which the test compares with the server's expiry); after a line on
stdin (the link is back), tries a fenced write and prints "fenced" for the
helper's typed LF001 error, anything else otherwise.
"""
import os
import sys
import time

import psycopg

import pglease

conninfo, name, ttl = os.environ["NF_CONNINFO"], os.environ["NF_NAME"], int(os.environ["NF_TTL_MS"]) / 1000
INSERT = "INSERT INTO nf_work (lease_name, note) VALUES (%s, %s)"

try:
    with pglease.hold(conninfo, name, ttl=ttl) as lease:
        with psycopg.connect(conninfo, prepare_threshold=None) as conn, lease.transaction(conn):
            conn.execute(INSERT, (name, "held"))
        print("held", lease.token, flush=True)
        if lease.lost.wait(30):
            print("lost", int(time.time() * 1000), flush=True)
        sys.stdin.readline()
        try:
            with psycopg.connect(conninfo, prepare_threshold=None, connect_timeout=5) as conn, lease.transaction(conn):
                conn.execute(INSERT, (name, "zombie"))
            print("written", flush=True)
        except pglease.FencedError as error:
            print("fenced", error.detail, flush=True)
except pglease.LeaseLost:
    pass
