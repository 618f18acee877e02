"""An exactly-once consumer (docs/recipes.md, "Exactly-once consumer").

The worker owns partitions through leases named "partition:N". For each batch
it reads from `inbox` at its offset, computes the output, and commits the
output rows and its new offset in ONE transaction fenced by the partition's
token: a zombie (a worker that lost the lease while paused) can move neither,
and the next owner resumes exactly at the committed offset.

Usage: consumer.py OWNER PARTITIONS [--ttl S] [--batch N] [--max-owned N]
                   [--work-ms MS] [--stop-file PATH]
Connects with libpq's PG* environment. Prints one line per event on stdout
("acquired P T OFFSET", "committed P FROM TO", "fenced P T", "lost P T") and
runs until --stop-file exists.
"""

import argparse
import hashlib
import os
import random
import sys
import time

import psycopg

FENCE_REJECTED = "LF001"


def log(*words):
    print(*words, flush=True)


def process(payload):
    """The consumer's work: any deterministic function of the message."""
    return hashlib.md5(payload.encode()).hexdigest()


class Consumer:
    def __init__(self, conn, owner, partitions, ttl, batch, max_owned, work_ms):
        self.conn = conn
        self.owner = owner
        self.partitions = partitions
        self.ttl = ttl
        self.batch = batch
        self.max_owned = max_owned
        self.work_ms = work_ms
        self.owned = {}  # partition -> [token, next offset]
        self.renewed_at = time.monotonic()

    def claim(self):
        """Acquire free (or expired) partitions, up to max_owned."""
        candidates = [p for p in range(self.partitions) if p not in self.owned]
        random.shuffle(candidates)
        for partition in candidates:
            if len(self.owned) >= self.max_owned:
                return
            with self.conn.transaction():
                token = self.conn.execute(
                    "SELECT lease.lease_acquire(%s, %s, make_interval(secs => %s))",
                    (f"partition:{partition}", self.owner, self.ttl)).fetchone()[0]
            if token is None:
                continue
            # Read the offset only after the grant has committed: every write
            # of a previous owner that passed the fence has committed by now
            # (a grant cannot commit while such a write is open).
            with self.conn.transaction():
                offset = self.conn.execute(
                    "SELECT next_offset FROM consumer_offsets WHERE partition = %s",
                    (partition,)).fetchone()[0]
            self.owned[partition] = [token, offset]
            log("acquired", partition, token, offset)

    def consume(self, partition):
        """One batch: output rows and the new offset, in one fenced transaction."""
        token, offset = self.owned[partition]
        with self.conn.transaction():
            rows = self.conn.execute(
                'SELECT "offset", payload FROM inbox WHERE partition = %s AND "offset" >= %s '
                'ORDER BY "offset" LIMIT %s', (partition, offset, self.batch)).fetchall()
        if not rows:
            return False
        offsets = [row[0] for row in rows]
        results = [process(row[1]) for row in rows]
        time.sleep(self.work_ms / 1000)
        try:
            with self.conn.transaction():
                self.conn.execute("SELECT lease.set_fence_token(%s)", (token,))
                self.conn.execute(
                    'INSERT INTO outbox (partition, "offset", result) '
                    "SELECT %s, o, r FROM unnest(%s::bigint[], %s::text[]) AS u(o, r)",
                    (partition, offsets, results))
                self.conn.execute(
                    "UPDATE consumer_offsets SET next_offset = %s WHERE partition = %s",
                    (offsets[-1] + 1, partition))
        except psycopg.Error as error:
            if error.sqlstate != FENCE_REJECTED:
                raise
            # A zombie: the partition has another owner now. Nothing was written.
            log("fenced", partition, token)
            del self.owned[partition]
            return False
        self.owned[partition][1] = offsets[-1] + 1
        log("committed", partition, offsets[0], offsets[-1])
        return True

    def heartbeat(self):
        """Renew every owned partition; forget those that were lost."""
        for partition, (token, _) in list(self.owned.items()):
            with self.conn.transaction():
                alive = self.conn.execute(
                    "SELECT lease.lease_heartbeat(%s, %s)", (f"partition:{partition}", token)).fetchone()[0]
            if not alive:
                log("lost", partition, token)
                del self.owned[partition]
        self.renewed_at = time.monotonic()

    def step(self):
        self.claim()
        worked = False
        for partition in list(self.owned):
            if partition not in self.owned:  # lost at the last heartbeat
                continue
            worked = self.consume(partition) or worked
            # Writes come before the heartbeat on purpose: a worker that was
            # paused past its TTL tries to commit, and the fence refuses it.
            if time.monotonic() - self.renewed_at >= self.ttl / 3:
                self.heartbeat()
        if time.monotonic() - self.renewed_at >= self.ttl / 3:
            self.heartbeat()
        if not worked:
            time.sleep(0.05)


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("owner")
    parser.add_argument("partitions", type=int)
    parser.add_argument("--ttl", type=float, default=1.0)
    parser.add_argument("--batch", type=int, default=50)
    parser.add_argument("--max-owned", type=int, default=3)
    parser.add_argument("--work-ms", type=float, default=0)
    parser.add_argument("--stop-file")
    args = parser.parse_args()
    with psycopg.connect("", autocommit=True, application_name=args.owner) as conn:
        consumer = Consumer(conn, args.owner, args.partitions, args.ttl, args.batch, args.max_owned, args.work_ms)
        while not (args.stop_file and os.path.exists(args.stop_file)):
            consumer.step()
        for partition, (token, _) in consumer.owned.items():
            conn.execute("SELECT lease.lease_release(%s, %s)", (f"partition:{partition}", token))
    return 0


if __name__ == "__main__":
    sys.exit(main())
