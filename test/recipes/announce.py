"""Leader election with a published address (docs/recipes.md,
"Leader election with a published address").

etcd's Campaign, Proclaim and Observe in SQL. A candidate waits for the lease
"primary" (Campaign), and as leader publishes where it can be reached with
lease_set_value, guarded by its token (Proclaim), again at every renewal with
its current load. An observer finds the leader with lease.leader() and follows
its changes through the events on lease_events (Observe).

Usage: announce.py campaign NODE --address ADDR [--ttl S]
       announce.py observe NAME [--ttl S]
Connects with libpq's PG* environment. A candidate prints "leader T ADDR" when
elected, "refused T" when its publication is refused and "stepped-down T" when
its renewal is (it lost the lease: it stops leading), "released T"
on SIGTERM. An observer prints "leader OWNER T ADDR" whenever the leader's
published address changes, and "none" when nobody leads.
"""

import argparse
import json
import select
import signal
import sys
import time

import psycopg

LEASE = "primary"

stopping = False


def log(*words):
    print(*words, flush=True)


def on_sigterm(signum, frame):
    global stopping
    stopping = True


def pause(seconds):
    """Sleeps, but returns at once on SIGTERM (time.sleep would finish its sleep first)."""
    deadline = time.monotonic() + seconds
    while not stopping and time.monotonic() < deadline:
        time.sleep(min(0.05, max(0.0, deadline - time.monotonic())))


def campaign(conn, args):
    while not stopping:
        # Campaign: wait in line for the lease (woken by a release or an expiry).
        token = conn.execute(
            "SELECT lease.lease_acquire(%s, %s, make_interval(secs => %s), make_interval(secs => %s))",
            (LEASE, args.name, args.ttl, args.ttl)).fetchone()[0]
        if token is None:
            continue
        log("leader", token, args.address)
        load = 0
        # Proclaim, then renew: the value is published only while the token is the live grant.
        while not stopping:
            load += 1
            value = json.dumps({"address": args.address, "load": load})
            if not conn.execute("SELECT lease.lease_set_value(%s, %s, %s)", (LEASE, token, value)).fetchone()[0]:
                log("refused", token)  # the grant ended (a pause past the TTL): another candidate may lead
                break
            if not conn.execute("SELECT lease.lease_heartbeat(%s, %s)", (LEASE, token)).fetchone()[0]:
                log("stepped-down", token)
                break
            pause(args.ttl / 3)
        else:
            conn.execute("SELECT lease.lease_release(%s, %s)", (LEASE, token))
            log("released", token)


def observe(conn, args):
    events = []
    conn.add_notify_handler(lambda notify: events.append(json.loads(notify.payload)))
    # LISTEN lease_events, and count as a watcher (lease.notify_events = watched).
    conn.execute("SELECT lease.listen_events()")
    shown = None
    while not stopping:
        # Who leads, and where: one row while the lease is held, none while it is free.
        row = conn.execute("SELECT owner, token, value->>'address', expires_at - clock_timestamp() "
                           "FROM lease.leader(%s)", (LEASE,)).fetchone()
        leader = (row[0], row[1], row[2]) if row else None
        if leader != shown and (leader is None or leader[2] is not None):
            log("leader", *leader) if leader else log("none")
            shown = leader
        # Wait for an event about the lease (acquired, value_set, released,
        # revoked, expired), or until the leader's lease would expire: an
        # expiry is reported only when someone asks.
        left = row[3].total_seconds() if row else args.ttl
        deadline = time.monotonic() + max(0.0, left) + 0.05
        events.clear()
        while not stopping and time.monotonic() < deadline and not any(e.get("name") == LEASE for e in events):
            if select.select([conn.fileno()], [], [], min(0.2, max(0.0, deadline - time.monotonic())))[0]:
                conn.execute("SELECT 1")  # psycopg reads the notifications that arrived


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["campaign", "observe"])
    parser.add_argument("name")
    parser.add_argument("--address")
    parser.add_argument("--ttl", type=float, default=2.0)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)
    with psycopg.connect("", autocommit=True, application_name=args.name) as conn:
        campaign(conn, args) if args.role == "campaign" else observe(conn, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
