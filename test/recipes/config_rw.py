"""Readers and a writer on a config (docs/recipes.md, "Readers and a writer on a config").

The config is several rows read one at a time, the way an application reads
its settings as it needs them. Readers hold a shared grant of the lease
"config" while they read; a writer holds it exclusively while it writes, in
one transaction fenced by its token. A writer waits for the readers holding
the config, and readers that ask after it wait behind it: a stream of readers
cannot starve it, and no reader sees half of one version and half of another.

Usage: config_rw.py reader OWNER [--ttl S] [--read-ms MS] [--stop-file PATH]
       config_rw.py writer OWNER --version V [--ttl S] [--write-ms MS]
Connects with libpq's PG* environment. A reader prints "read T V1 V2 ..." (the
version of each key it read, under shared token T) per read, until --stop-file
exists. A writer prints "asked", "granted T WAITED_MS" and "written T V", or
"fenced T".
"""

import argparse
import os
import sys
import time

import psycopg

FENCE_REJECTED = "LF001"
LEASE = "config"
KEYS = ["db.host", "db.port", "cache.size", "feature.x", "feature.y"]


def log(*words):
    print(*words, flush=True)


def reader(conn, args):
    while not (args.stop_file and os.path.exists(args.stop_file)):
        # Shared: beside other readers, not beside the writer, and behind a waiting writer.
        token = conn.execute(
            "SELECT lease.lease_acquire_shared(%s, %s, make_interval(secs => %s), '1 minute')",
            (LEASE, args.owner, args.ttl)).fetchone()[0]
        if token is None:
            continue
        versions = []
        for key in KEYS:  # one statement per key: the config is not read in one snapshot
            versions.append(conn.execute("SELECT version FROM config WHERE key = %s", (key,)).fetchone()[0])
            time.sleep(args.read_ms / 1000 / len(KEYS))
        conn.execute("SELECT lease.lease_release(%s, %s)", (LEASE, token))
        log("read", token, *versions)


def writer(conn, args):
    asked = time.monotonic()
    log("asked")
    # Exclusive: waits for the readers that hold the config, ahead of readers that ask later.
    token = conn.execute(
        "SELECT lease.lease_acquire(%s, %s, make_interval(secs => %s), '1 minute')",
        (LEASE, args.owner, args.ttl)).fetchone()[0]
    if token is None:
        log("busy")
        return 75
    log("granted", token, round((time.monotonic() - asked) * 1000))
    try:
        # Every key in one transaction, fenced by the exclusive token.
        with conn.transaction():
            conn.execute("SELECT lease.set_fence_token(%s)", (token,))
            for key in KEYS:
                conn.execute("UPDATE config SET value = %s, version = %s WHERE key = %s",
                             (f"{key} of version {args.version}", args.version, key))
                time.sleep(args.write_ms / 1000 / len(KEYS))
    except psycopg.Error as error:
        if error.sqlstate != FENCE_REJECTED:
            raise
        log("fenced", token)
        return 79
    conn.execute("SELECT lease.lease_release(%s, %s)", (LEASE, token))
    log("written", token, args.version)
    return 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("role", choices=["reader", "writer"])
    parser.add_argument("owner")
    parser.add_argument("--version", type=int)
    parser.add_argument("--ttl", type=float, default=5.0)
    parser.add_argument("--read-ms", type=float, default=150)
    parser.add_argument("--write-ms", type=float, default=150)
    parser.add_argument("--stop-file")
    args = parser.parse_args()
    with psycopg.connect("", autocommit=True, application_name=args.owner) as conn:
        return reader(conn, args) if args.role == "reader" else writer(conn, args)


if __name__ == "__main__":
    sys.exit(main() or 0)
