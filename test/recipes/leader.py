"""Leader election (docs/recipes.md, "Leader election").

One leader among any number of these processes: the holder of lease
"leader". The leader does its work as fenced writes (a row in leader_log per
tick, under its token). Followers LISTEN on lease_events and try to take over
as soon as the leader releases the lease, or when it would expire.

Usage: leader.py NAME [--ttl S] [--tick S]
Connects with libpq's PG* environment. Prints one line per event on stdout
("leader T", "follower", "fenced T", "stepped-down T", "released T").
SIGTERM: a leader releases the lease (a follower takes over at once) and exits.
"""

import argparse
import json
import select
import signal
import sys
import time

import psycopg

FENCE_REJECTED = "LF001"
LEASE = "leader"

stopping = False


def log(*words):
    print(*words, flush=True)


def on_sigterm(signum, frame):
    global stopping
    stopping = True


def lead(conn, name, token, ttl, tick):
    """Work as the leader until the lease is lost or SIGTERM; returns normally on both."""
    renewed_at = time.monotonic()
    while not stopping:
        try:
            # The leader's work: a write fenced by its token (fence_trigger on leader_log).
            conn.execute("INSERT INTO leader_log (writer, fence_token) VALUES (%s, %s)", (name, token))
        except psycopg.Error as error:
            if error.sqlstate != FENCE_REJECTED:
                raise
            log("fenced", token)
            return
        if time.monotonic() - renewed_at >= ttl / 3:
            if not conn.execute("SELECT lease.lease_heartbeat(%s, %s)", (LEASE, token)).fetchone()[0]:
                log("stepped-down", token)
                return
            renewed_at = time.monotonic()
        time.sleep(tick)
    conn.execute("SELECT lease.lease_release(%s, %s)", (LEASE, token))
    log("released", token)


def wait_for_a_chance(conn, events, ttl):
    """Sleep until the leader releases (or loses) the lease, or until it would expire."""
    left = conn.execute(
        "SELECT extract(epoch FROM expires_in) FROM lease.status WHERE name = %s AND state = 'held'",
        (LEASE,)).fetchone()
    deadline = time.monotonic() + (float(left[0]) if left and left[0] is not None else ttl)
    while not stopping and time.monotonic() < deadline:
        # Wait on the socket (not in a blocking call), so that SIGTERM and the deadline stay in reach.
        if select.select([conn.fileno()], [], [], min(0.2, max(0.0, deadline - time.monotonic())))[0]:
            conn.execute("SELECT 1")  # psycopg reads the notifications that arrived
        if any(e.get("name") == LEASE and e.get("event") in ("released", "revoked", "expired") for e in events):
            break
    events.clear()


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("name")
    parser.add_argument("--ttl", type=float, default=2.0)
    parser.add_argument("--tick", type=float, default=0.1)
    args = parser.parse_args()
    signal.signal(signal.SIGTERM, on_sigterm)
    with psycopg.connect("", autocommit=True, application_name=args.name) as conn:
        events = []
        conn.add_notify_handler(lambda notify: events.append(json.loads(notify.payload)))
        # LISTEN lease_events, and count as a watcher (lease.notify_events = watched).
        conn.execute("SELECT lease.listen_events()")
        while not stopping:
            token = conn.execute(
                "SELECT lease.lease_acquire(%s, %s, make_interval(secs => %s))",
                (LEASE, args.name, args.ttl)).fetchone()[0]
            if token is not None:
                log("leader", token)
                lead(conn, args.name, token, args.ttl, args.tick)
            else:
                log("follower")
                wait_for_a_chance(conn, events, args.ttl)
    return 0


if __name__ == "__main__":
    sys.exit(main())
