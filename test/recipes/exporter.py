"""Bounded parallel export (docs/recipes.md, "Bounded parallel export").

At most PERMITS exports run at once, across every process: each export holds a
permit of the semaphore "exports" while it runs, and writes its rows fenced by
the permit's token (fence_trigger('exports') on export_rows and export_done).
An exporter that stalls past its TTL loses its permit to a waiting exporter;
when it wakes, its next write is rejected (LF001) and it starts the job again
under a new permit.

Usage: exporter.py OWNER JOB... [--permits N] [--ttl S] [--parts N] [--work-ms MS]
Connects with libpq's PG* environment. Prints one line per event on stdout
("acquired JOB T", "exported JOB T", "fenced JOB T", "lost JOB T").
"""

import argparse
import sys
import time

import psycopg

FENCE_REJECTED = "LF001"
SEMAPHORE = "exports"


def log(*words):
    print(*words, flush=True)


class Lost(Exception):
    """The permit ended (taken over after a stall, or revoked): stop writing."""


def export(conn, job, token, args):
    """Writes the job's parts, then marks it done, each write fenced by the permit's token."""
    renewed_at = time.monotonic()
    for part in range(args.parts):
        time.sleep(args.work_ms / 1000)  # reading the source, formatting the part
        # The part, fenced: the trigger checks that token is a live permit of "exports".
        conn.execute("INSERT INTO export_rows (job, part, fence_token) VALUES (%s, %s, %s)", (job, part, token))
        # Writes come before the heartbeat on purpose: an exporter that was
        # paused past its TTL tries to write, and the fence refuses it.
        if time.monotonic() - renewed_at >= args.ttl / 3:
            if not conn.execute("SELECT lease.lease_heartbeat(%s, %s)", (SEMAPHORE, token)).fetchone()[0]:
                raise Lost()
            renewed_at = time.monotonic()
    conn.execute("INSERT INTO export_done (job, fence_token) VALUES (%s, %s)", (job, token))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("owner")
    parser.add_argument("jobs", nargs="+")
    parser.add_argument("--permits", type=int, default=3)
    parser.add_argument("--ttl", type=float, default=1.0)
    parser.add_argument("--parts", type=int, default=6)
    parser.add_argument("--work-ms", type=float, default=100)
    args = parser.parse_args()
    with psycopg.connect("", autocommit=True, application_name=args.owner) as conn:
        for job in args.jobs:
            while True:
                # Wait (in the server, woken on a release or an expiry) for one of the permits.
                token = conn.execute(
                    "SELECT lease.semaphore_acquire(%s, %s, %s, make_interval(secs => %s), '1 minute')",
                    (SEMAPHORE, args.owner, args.permits, args.ttl)).fetchone()[0]
                if token is None:
                    continue
                log("acquired", job, token)
                try:
                    export(conn, job, token, args)
                except psycopg.Error as error:
                    if error.sqlstate != FENCE_REJECTED:
                        raise
                    # A zombie: the permit was taken over while this process
                    # stalled. Nothing more was written; export the job again.
                    log("fenced", job, token)
                    continue
                except Lost:
                    log("lost", job, token)
                    continue
                conn.execute("SELECT lease.lease_release(%s, %s)", (SEMAPHORE, token))
                log("exported", job, token)
                break
    return 0


if __name__ == "__main__":
    sys.exit(main())
