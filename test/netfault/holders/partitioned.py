"""A client helper's lease holder for test/netfault/run.sh (Python).

Holds NF_NAME (TTL NF_TTL_MS) over NF_CONNINFO, writes one fenced row and
prints "held TOKEN" and the times of those two calls (for the history log:
ACQUIRE_INVOKE_US ACQUIRE_COMPLETE_US WRITE_INVOKE_US WRITE_COMPLETE_US, the
wall clock in microseconds just before each call and just after it returned);
when the helper signals the loss, prints "lost MS" (the wall clock, which the
test compares with the server's expiry); after a line on stdin (the link is
back), tries a fenced write and prints "fenced" for the helper's typed LF001
error, "written" if it committed, "error" otherwise, each followed by
INVOKE_US COMPLETE_US of that write.
"""
import os
import sys
import time

import psycopg

import pglease

conninfo, name, ttl = os.environ["NF_CONNINFO"], os.environ["NF_NAME"], int(os.environ["NF_TTL_MS"]) / 1000
INSERT = "INSERT INTO nf_work (lease_name, note) VALUES (%s, %s)"


def now_us():
    return time.time_ns() // 1000


try:
    acquire_invoke = now_us()
    with pglease.hold(conninfo, name, ttl=ttl) as lease:
        acquire_complete = write_invoke = now_us()
        with psycopg.connect(conninfo, prepare_threshold=None) as conn, lease.transaction(conn):
            conn.execute(INSERT, (name, "held"))
        print("held", lease.token, acquire_invoke, acquire_complete, write_invoke, now_us(), flush=True)
        if lease.lost.wait(30):
            print("lost", int(time.time() * 1000), flush=True)
        sys.stdin.readline()
        write_invoke = now_us()
        try:
            with psycopg.connect(conninfo, prepare_threshold=None, connect_timeout=5) as conn, lease.transaction(conn):
                conn.execute(INSERT, (name, "zombie"))
            print("written", write_invoke, now_us(), flush=True)
        except pglease.FencedError as error:
            print("fenced", write_invoke, now_us(), error.detail, flush=True)
        except psycopg.Error as error:
            print("error", write_invoke, now_us(), error, flush=True)
except pglease.LeaseLost:
    pass
