"""Per-host lock and idempotency key, in SQL (docs/recipes.md,
"Per-host lock and idempotency key").

Restarts one host for one operation: at most one mutation per host at a time
(the lease "host:HOST"), and each intended effect once (the key
"OP:HOST:restart"), verified by looking at the host rather than trusting the
restart command's exit status.

Usage: host_restart.py OP HOST --restart CMD --verify CMD [--owner ID] [--ttl S] [--wait S]
CMD are shell commands. Connects with libpq's PG* environment. Prints the key's
status and result on stdout. Exits 0 when the restart is done and verified
(now or before), 1 when it failed (the key stays retryable), 75 when the host
or the key is busy, 79 when a lease was lost.
"""

import argparse
import json
import os
import socket
import subprocess
import sys

import psycopg


def run_supervised(conn, command, host_lease, key, ttl):
    """Runs a shell command while renewing both grants every ttl/3; None if one was lost."""
    process = subprocess.Popen(command, shell=True, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    while True:
        try:
            output, _ = process.communicate(timeout=ttl / 3)
            return process.returncode, output
        except subprocess.TimeoutExpired:
            pass
        renewed = conn.execute(
            "SELECT lease.lease_heartbeat(%s, %s) AND lease.idempotency_heartbeat(%s, %s)",
            (host_lease[0], host_lease[1], key[0], key[1])).fetchone()[0]
        if not renewed:
            process.kill()
            process.wait()
            return None


def restart(conn, args, owner):
    host_lease = f"host:{args.host}"
    key = f"{args.op}:{args.host}:restart"
    # 1. One mutation per host at a time: wait for the host's lease.
    host_token = conn.execute(
        "SELECT lease.lease_acquire(%s, %s, make_interval(secs => %s), make_interval(secs => %s))",
        (host_lease, owner, args.ttl, args.wait)).fetchone()[0]
    if host_token is None:
        print("busy: host", args.host)
        return 75
    try:
        # 2. Each intended effect once: begin its key. The fingerprint is the
        #    request itself, so another request reusing the key is LF002.
        status, key_token, result = conn.execute(
            "SELECT status, token, result FROM lease.idempotency_begin(%s, %s, %s, make_interval(secs => %s))",
            (key, f"restart {args.host} (verify: {args.verify})", owner, args.ttl)).fetchone()
        if status != "started":
            print(status, json.dumps(result))
            return {"completed": 0, "in_progress": 75}.get(status, 1)

        # 3. The effect, then 4. its verification: the world, not the exit code.
        restarted = run_supervised(conn, args.restart, (host_lease, host_token), (key, key_token), args.ttl)
        verified = None
        if restarted is not None and restarted[0] == 0:
            verified = run_supervised(conn, args.verify, (host_lease, host_token), (key, key_token), args.ttl)
        if restarted is None or (restarted[0] == 0 and verified is None):
            print("lost: a lease ended while the restart ran")
            return 79
        done = restarted[0] == 0 and verified[0] == 0
        outcome = {"restart": {"status": restarted[0], "output": restarted[1]},
                   "verify": None if verified is None else {"status": verified[0], "output": verified[1]}}

        # 5. Record the outcome: the host's ledger row (fenced by the host's
        #    token) and the key's completion (fenced by the key's token) in one
        #    transaction; a retryable failure when the restart is not verified.
        try:
            with conn.transaction():
                conn.execute("SELECT lease.set_fence_token(%s)", (host_token,))
                conn.execute("INSERT INTO host_actions (host, op, action, verified) VALUES (%s, %s, 'restart', %s)",
                             (args.host, args.op, done))
                finish = "idempotency_complete(%s, %s, %s)" if done else "idempotency_fail(%s, %s, %s, true)"
                conn.execute("SELECT lease." + finish, (key, key_token, json.dumps(outcome)))
        except psycopg.Error as error:
            if error.sqlstate != "LF001":
                raise
            print("lost:", error)  # taken over meanwhile: neither the row nor the completion was written
            return 79
        print("completed" if done else "failed", json.dumps(outcome))
        return 0 if done else 1
    finally:
        conn.execute("SELECT lease.lease_release(%s, %s)", (host_lease, host_token))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("op")
    parser.add_argument("host")
    parser.add_argument("--restart", required=True)
    parser.add_argument("--verify", required=True)
    parser.add_argument("--owner", default=f"{socket.gethostname()}:{os.getpid()}")
    parser.add_argument("--ttl", type=float, default=10.0)
    parser.add_argument("--wait", type=float, default=60.0)
    args = parser.parse_args()
    with psycopg.connect("", autocommit=True) as conn:
        return restart(conn, args, args.owner)


if __name__ == "__main__":
    sys.exit(main())
