"""Transfers between accounts (docs/recipes.md, "Transfer between two accounts").

A transfer takes the leases of both accounts at once with lease_acquire_all,
in whatever order it names them: all or none, without deadlock. It then reads
both balances, computes the new ones, and writes them, its postings and the
transfer's outcome in one transaction fenced by the two tokens: a transfer
done before (by this process or one that crashed after committing it) is not
done again, and a transfer whose leases were lost writes nothing.

Usage: transfer.py OWNER TRANSFER_ID... [--ttl S] [--work-ms MS]
Connects with libpq's PG* environment. Prints "done ID", "declined ID",
"skipped ID" (done before) or "fenced ID" per transfer, and retries a fenced one.
"""

import argparse
import sys
import time

import psycopg

FENCE_REJECTED = "LF001"


def log(*words):
    print(*words, flush=True)


def transfer(conn, transfer_id, owner, ttl, work_ms):
    src, dst, amount = conn.execute(
        "SELECT src, dst, amount FROM transfers WHERE id = %s", (transfer_id,)).fetchone()
    names = [f"account:{src}", f"account:{dst}"]  # in the transfer's own order: no global order needed
    # Both accounts or neither, waiting in each account's line.
    tokens = conn.execute(
        "SELECT lease.lease_acquire_all(%s, %s, make_interval(secs => %s), '1 minute')",
        (names, owner, ttl)).fetchone()[0]
    if tokens is None:
        return "busy"
    src_token, dst_token = tokens  # aligned with names
    try:
        # Read after the grant: every transfer that held these accounts before has committed.
        status = conn.execute("SELECT status FROM transfers WHERE id = %s", (transfer_id,)).fetchone()[0]
        if status is not None:
            return "skipped"
        balances = dict(conn.execute(
            "SELECT id, balance FROM accounts WHERE id IN (%s, %s)", (src, dst)).fetchall())
        time.sleep(work_ms / 1000)  # e.g. a fraud check
        with conn.transaction():
            if balances[src] < amount:
                outcome = "declined"
            else:
                outcome = "done"
                # Each account row is fenced by its own lease: each UPDATE carries that account's token.
                conn.execute("UPDATE accounts SET balance = %s, fence_token = %s WHERE id = %s",
                             (balances[src] - amount, src_token, src))
                conn.execute("UPDATE accounts SET balance = %s, fence_token = %s WHERE id = %s",
                             (balances[dst] + amount, dst_token, dst))
                conn.execute("INSERT INTO postings (transfer, account, delta, fence_token) "
                             "VALUES (%s, %s, %s, %s), (%s, %s, %s, %s)",
                             (transfer_id, src, -amount, src_token, transfer_id, dst, amount, dst_token))
            conn.execute("UPDATE transfers SET status = %s, fence_token = %s WHERE id = %s",
                         (outcome, src_token, transfer_id))
        return outcome
    except psycopg.Error as error:
        if error.sqlstate != FENCE_REJECTED:
            raise
        return "fenced"  # a lease was lost (paused past the TTL): nothing was written
    finally:
        for name, token in zip(names, tokens):
            conn.execute("SELECT lease.lease_release(%s, %s)", (name, token))


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("owner")
    parser.add_argument("transfers", nargs="+", type=int)
    parser.add_argument("--ttl", type=float, default=2.0)
    parser.add_argument("--work-ms", type=float, default=0)
    args = parser.parse_args()
    with psycopg.connect("", autocommit=True, application_name=args.owner) as conn:
        for transfer_id in args.transfers:
            while True:
                outcome = transfer(conn, transfer_id, args.owner, args.ttl, args.work_ms)
                log(outcome, transfer_id)
                if outcome not in ("busy", "fenced"):
                    break
    return 0


if __name__ == "__main__":
    sys.exit(main())
