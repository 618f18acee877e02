"""Tests of the Python helper (clients/python) against a real cluster; run by
test/clients/run.sh, which sets the environment:

  CLIENTS_CONNINFO   where the helper and the application connect (the server,
                     or PgBouncer in transaction mode)
  CLIENTS_ADMIN      a superuser connection straight to the server, for checks
  CLIENTS_PREFIX     prefix of the lease names this run uses
  CLIENTS_SERVER_STOP / CLIENTS_SERVER_START   shell commands
Prints "ok - ..." / "not ok - ..." lines and "# end" when it ran to the end.
"""

import os
import contextlib
import signal
import subprocess
import sys
import threading
import time

import psycopg

import pglease

CONNINFO = os.environ["CLIENTS_CONNINFO"]
ADMIN = os.environ["CLIENTS_ADMIN"]
PREFIX = os.environ["CLIENTS_PREFIX"]
TWO_53 = 2**53
UNREACHABLE = "host=127.0.0.1 port=1 dbname=postgres connect_timeout=1"


def report(ok, description, diagnostic=""):
    print(("ok - " if ok else "not ok - ") + description, flush=True)
    if not ok and diagnostic:
        for line in str(diagnostic).splitlines():
            print("#   " + line, flush=True)


def admin(query, *params):
    with psycopg.connect(ADMIN, autocommit=True) as conn:
        return conn.execute(query, params).fetchone()


def lease_row(name):
    return admin(
        "SELECT owner, token::text, state, extract(epoch FROM expires_at)::float8 FROM lease.status WHERE name = %s",
        name,
    )


def test_acquire_release_bigint():
    name = PREFIX + "acquire"
    with pglease.hold(CONNINFO, name, owner="py-a", ttl=5) as lease:
        owner, token_text, state, _ = lease_row(name)
        report(
            isinstance(lease.token, int) and lease.token > TWO_53 and str(lease.token) == token_text
            and state == "held" and owner == "py-a",
            f"acquire: token {lease.token} (> 2^53) is the server's exactly, lease held by the owner",
            f"token {lease.token!r}, server {token_text}, {state}, {owner}",
        )
        first = lease.token
    state = lease_row(name)[2]
    report(state == "free", "release when the with block ends", state)

    with pglease.hold(CONNINFO, name, owner="py-a", ttl=5) as lease:
        token_text = lease_row(name)[1]
        # Two grants in a row: one of the tokens is odd, which no float64 can hold above 2^53.
        report(
            lease.token == first + 1 and str(lease.token) == token_text,
            f"bigint tokens round-trip exactly, odd and even: {first}, {lease.token}",
            f"server {token_text}",
        )


def test_release_on_exception():
    name = PREFIX + "exception"
    try:
        with pglease.hold(CONNINFO, name, ttl=5):
            raise KeyError("boom")
    except KeyError:
        pass
    report(lease_row(name)[2] == "free", "release when the with block raises")


def test_not_acquired():
    name = PREFIX + "busy"
    with pglease.hold(CONNINFO, name, owner="py-first", ttl=5):
        try:
            with pglease.hold(CONNINFO, name, owner="py-second", wait=0):
                report(False, "a held lease is not acquired (wait 0)")
        except pglease.NotAcquired:
            report(True, "a held lease is not acquired: NotAcquired (wait 0)")
        started = time.monotonic()
        try:
            with pglease.hold(CONNINFO, name, owner="py-second", wait=0.4):
                report(False, "NotAcquired after wait")
        except pglease.NotAcquired:
            waited = time.monotonic() - started
            report(0.4 <= waited < 1.5, f"NotAcquired after wait 0.4 s (took {waited:.2f} s)")


def test_waiter_woken():
    """A waiter is woken by the release: the server queues it (no polling every TTL/10, 1 s here)."""
    name = PREFIX + "wait"
    first = pglease.hold(CONNINFO, name, owner="py-first", ttl=10)
    first.__enter__()
    releasing = []

    def release_soon():
        time.sleep(0.5)
        releasing.append(time.monotonic())
        first.__exit__(None, None, None)

    releaser = threading.Thread(target=release_soon)
    releaser.start()
    with pglease.hold(CONNINFO, name, owner="py-second", ttl=10, wait=3) as second:
        took = time.monotonic() - releasing[0]
    releaser.join()
    report(
        second.token > first.token and took < 0.3,
        f"a waiter gets the lease {took * 1000:.0f} ms after the holder starts releasing it (wait 3 s, TTL 10 s)",
    )


def test_errors():
    try:
        pglease.hold(CONNINFO, "py-bad", ttl=0.05)
        report(False, "a ttl under 100 ms is refused")
    except ValueError as error:
        report("100 ms" in str(error), "a ttl under 100 ms is refused", error)
    try:
        with pglease.hold(CONNINFO, ""):
            pass
        report(False, "an empty lease name is refused")
    except ValueError:
        report(True, "an empty lease name is refused")
    try:
        with pglease.hold(f"{CONNINFO} port=1", "py-unreachable"):
            pass
        report(False, "an unreachable server: psycopg.OperationalError")
    except psycopg.OperationalError:
        report(True, "an unreachable server: psycopg.OperationalError")


def test_bad_input():
    """The same bad input gets the same message from every helper
    (docs/clients.md, "Bad input"), before any round trip: the server here is
    unreachable, so a round trip would raise OperationalError instead."""
    down = f"{CONNINFO} port=1"
    cases = [
        ("an empty name", lambda: pglease.hold(down, ""), "pglease: the lease name must not be empty"),
        ("a zero ttl", lambda: pglease.hold(down, "py-bad", ttl=0), "pglease: the ttl must be at least 100 ms, not 0.0 s"),
        ("a negative ttl", lambda: pglease.hold(down, "py-bad", ttl=-1), "pglease: the ttl must be at least 100 ms, not -1.0 s"),
        ("a negative wait", lambda: pglease.hold(down, "py-bad", wait=-0.001), "pglease: wait must not be negative"),
        ("no connection (None)", lambda: pglease.hold(None, "py-bad"), "pglease: no connection given"),
        (
            "a malformed key=value string",
            lambda: pglease.hold("host=/tmp port=1 dbname", "py-bad"),
            'pglease: malformed connection string: missing "=" after "dbname" in connection info string',
        ),
        (
            "an unknown keyword",
            lambda: pglease.hold("host=/tmp port=1 colour=blue", "py-bad"),
            'pglease: malformed connection string: invalid connection option "colour"',
        ),
        (
            "a malformed URI",
            lambda: pglease.hold("postgresql://[::1", "py-bad"),
            "pglease: malformed connection string: ",
        ),
    ]
    for what, call, message in cases:
        try:
            with call():
                pass
            report(False, f'bad input, {what}: ValueError "{message}"')
        except ValueError as error:
            ok = str(error) == message or (message.endswith(": ") and str(error).startswith(message))
            report(ok, f'bad input, {what}: ValueError "{message}" before any round trip', repr(error))
        except Exception as error:
            report(False, f'bad input, {what}: ValueError "{message}"', repr(error))
    with pglease.hold(CONNINFO, PREFIX + "bad-input", ttl=5) as lease:
        for what, call in [("transaction(None)", lambda: lease.transaction(None).__enter__()), ("fence(None)", lambda: lease.fence(None))]:
            try:
                call()
                report(False, f'bad input, {what}: ValueError "pglease: no connection given"')
            except ValueError as error:
                report(str(error) == "pglease: no connection given", f'bad input, {what}: ValueError "pglease: no connection given"', repr(error))


def test_session():
    """A session: one keepalive for its leases, its close releases them all, a
    session closed behind its back is a loss, and pools in fair shares."""
    a_name, b_name = PREFIX + "session-a", PREFIX + "session-b"
    with pglease.session(CONNINFO, ttl=2) as session:
        a = session.acquire(a_name)
        b = session.acquire(b_name, wait=0.5)
        time.sleep(5)
        keepalives = admin("SELECT count(*) FROM lease.sessions WHERE id = %s", session.id)[0]
        states = [lease_row(a_name)[2], lease_row(b_name)[2]]
        report(
            not session.lost.is_set() and states == ["held", "held"] and b.token > a.token > TWO_53 and keepalives == 1,
            "a session keeps its two leases for 5 s (TTL 2 s) with its keepalive alone",
            f"lost: {session.lost_reason}, states {states}",
        )
        try:
            pglease.hold(CONNINFO, a_name).__enter__()
            report(False, "a session's lease is held against others")
        except pglease.NotAcquired:
            report(True, "a session's lease is held against others")
        with psycopg.connect(CONNINFO, autocommit=True, prepare_threshold=None) as conn:
            with a.transaction(conn):
                conn.execute("INSERT INTO client_log (lease_name, note) VALUES (%s, 'session')", (a_name,))
            admin("SELECT lease.lease_revoke(%s)", b_name)
            try:
                with b.transaction(conn):
                    conn.execute("INSERT INTO client_log (lease_name, note) VALUES (%s, 'revoked')", (b_name,))
                report(False, "a revoked session lease's fenced transaction raises FencedError")
            except pglease.FencedError as error:
                report(bool(error.detail), "a session lease fences: a revoked one's fenced transaction raises FencedError", error)
    states = [lease_row(a_name)[2], lease_row(b_name)[2]]
    report(states[0] == "free", "the end of the session's block closes it: its leases are released", states)

    lost_at = []
    try:
        with pglease.session(CONNINFO, ttl=1.5, on_lost=lambda s: lost_at.append(time.monotonic())) as session:
            session.acquire(a_name)
            admin("SELECT lease.session_close(%s)", session.id)
            closed = time.monotonic()
            session.lost.wait(3)
            try:
                session.acquire(b_name)
                report(False, "a lost session refuses acquire with LeaseLost")
            except pglease.LeaseLost:
                report(True, "a lost session refuses acquire with LeaseLost")
        report(False, "the with block raises LeaseLost after the session's loss")
    except pglease.LeaseLost as error:
        took = lost_at[0] - closed if lost_at else None
        report(took is not None and took <= 0.75, f"a session closed behind its back is lost at the next keepalive ({took and round(took, 3)} s), and the block raises LeaseLost", error)


def test_pool():
    pool = PREFIX + "pool"
    admin("SELECT lease.pool_put(%s, %s || i) FROM generate_series(1, 4) AS i", pool, pool + ":")
    with pglease.session(CONNINFO, ttl=5) as first, pglease.session(CONNINFO, ttl=5) as second:
        mine = first.claim(pool)
        report(len(mine) == 4 and all(m.state == {} for m in mine), "a lone claimer claims the whole pool", mine)
        theirs = second.claim(pool)
        surplus = first.surplus(pool)
        report(theirs == [] and len(surplus) == 2, "a second claimer: nothing free yet; the first has two beyond its share", (theirs, surplus))
        by_name = {m.name: m for m in mine}
        released = [by_name[name].release() for name in surplus]
        theirs = second.claim(pool)
        report(released == [True, True] and sorted(t.name for t in theirs) == sorted(surplus), "what the first hands back, the second claims", theirs)
        with psycopg.connect(CONNINFO, autocommit=True, prepare_threshold=None) as conn:
            old = by_name[surplus[0]]
            stale = old.checkpoint({"seq": 99})
            fresh = next(t for t in theirs if t.name == old.name).checkpoint({"seq": 1}, conn)
        state = admin("SELECT state FROM lease.pool_resources WHERE name = %s", old.name)[0]
        report(not stale and fresh and state == {"seq": 1}, "checkpoint under a stale token is false and changes nothing; under the current one it stores the state", (stale, fresh, state))
    try:
        pglease.session(None)
        report(False, 'bad input, session(None): ValueError "pglease: no connection given"')
    except ValueError as error:
        report(str(error) == "pglease: no connection given", 'bad input, session(None): ValueError "pglease: no connection given"', error)


def test_heartbeat():
    name = PREFIX + "heartbeat"
    with pglease.hold(CONNINFO, name, ttl=1) as lease:
        time.sleep(3.5)
        owner, token_text, state, _ = lease_row(name)
        renewed = admin(
            "SELECT clock_timestamp() - renewed_at < interval '0.5 s' FROM lease.leases WHERE name = %s", name
        )[0]
        report(
            not lease.lost.is_set() and state == "held" and token_text == str(lease.token) and renewed,
            "heartbeats keep a 1 s lease for 3.5 s under the same token",
            f"lost: {lease.lost_reason}, state {state}, renewed recently: {renewed}",
        )


def test_revoked():
    name = PREFIX + "revoked"
    seen = []
    with psycopg.connect(CONNINFO, autocommit=True) as conn:
        try:
            with pglease.hold(CONNINFO, name, ttl=1.5, on_lost=lambda l: seen.append(time.monotonic())) as lease:
                admin("SELECT lease.lease_revoke(%s)", name)
                revoked = time.monotonic()
                lease.lost.wait(3)
                try:
                    with lease.transaction(conn):
                        conn.execute("INSERT INTO client_log (lease_name, note) VALUES (%s, 'after revoke')", (name,))
                    fenced = None
                except pglease.FencedOff as error:
                    fenced = error
            report(False, "the with block raises LeaseLost after a loss")
        except pglease.LeaseLost as error:
            report(True, f"the with block raises LeaseLost after a loss ({error})")
    took = seen[0] - revoked if seen else None
    report(
        took is not None and took <= 0.5 + 0.25,
        f"a revoked lease is lost at the next heartbeat (on_lost after {took and round(took, 3)} s)",
    )
    written = admin("SELECT count(*) FROM client_log WHERE lease_name = %s", name)[0]
    report(
        isinstance(fenced, pglease.FencedOff) and isinstance(fenced, psycopg.DatabaseError) and fenced.sqlstate == "LF001"
        and written == 0,
        "a fenced transaction under the revoked token raises FencedOff (a psycopg.DatabaseError, sqlstate LF001) "
        "from the fence itself: nothing written to a table without a fence trigger",
        f"{fenced!r}, {written} rows",
    )
    report(
        isinstance(fenced, pglease.FencedError) and bool(fenced.detail) and fenced.detail in str(fenced),
        "the error is pglease.FencedError too (FencedOff is its old name), and keeps the server's DETAIL "
        "(error.detail, and in str(error))",
        f"{fenced!r}: {fenced}",
    )


def test_fence():
    name = PREFIX + "fence"
    with pglease.hold(CONNINFO, name, ttl=5) as lease, psycopg.connect(CONNINFO) as conn:
        with lease.transaction(conn):
            conn.execute("INSERT INTO client_work (lease_name, note) VALUES (%s, 'fenced')", (name,))
            conn.execute("UPDATE client_work SET note = 'updated' WHERE lease_name = %s", (name,))
        row = admin("SELECT note, fence_token::text FROM client_work WHERE lease_name = %s", name)
        report(
            row == ("updated", str(lease.token)),
            "lease.transaction(conn): INSERT and UPDATE pass the fence trigger; the row carries the token",
            repr(row),
        )
        with lease.transaction(conn):
            conn.execute("DELETE FROM client_work WHERE lease_name = %s", (name,))
        count = admin("SELECT count(*) FROM client_work WHERE lease_name = %s", name)[0]
        report(count == 0, "lease.transaction(conn): DELETE passes the fence trigger", f"{count} rows left")

        conn.autocommit = True
        try:
            lease.fence(conn)
            report(False, "fence() outside a transaction on an autocommit connection is refused")
        except ValueError as error:
            report("transaction" in str(error), "fence() outside a transaction on an autocommit connection is refused")
        try:
            conn.execute("SELECT lease.fenced_write(%s, %s)", (name, lease.token - 1))
            report(False, "any statement failing with LF001 raises FencedOff")
        except pglease.FencedOff as error:
            report(error.sqlstate == "LF001", "any statement failing with LF001 raises FencedOff", error.sqlstate)


def zombie_child(name):
    """Holds the lease, waits for a line on stdin (the parent stops and
    continues this process in between), then tries a fenced write."""
    with psycopg.connect(CONNINFO) as conn:
        try:
            with pglease.hold(CONNINFO, name, owner="py-zombie", ttl=1) as lease:
                print(lease.token, flush=True)
                sys.stdin.readline()
                try:
                    with lease.transaction(conn):
                        conn.execute("INSERT INTO client_work (lease_name, note) VALUES (%s, 'zombie')", (name,))
                    print("written", flush=True)
                except pglease.FencedOff as error:
                    print("fenced", error.sqlstate, flush=True)
                lease.lost.wait(2)
        except pglease.LeaseLost:
            print("lost", flush=True)


def test_zombie():
    name = PREFIX + "zombie"
    child = subprocess.Popen(
        [sys.executable, __file__, "--zombie", name], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    try:
        zombie_token = int(child.stdout.readline())
        child.send_signal(signal.SIGSTOP)
        time.sleep(1.3)
        with pglease.hold(CONNINFO, name, owner="py-successor", ttl=5, wait=3) as successor:
            child.send_signal(signal.SIGCONT)
            child.stdin.write("go\n")
            child.stdin.flush()
            outcome = child.stdout.readline().strip()
            ending = child.stdout.readline().strip()
            child.wait(10)
            written = admin("SELECT count(*) FROM client_work WHERE lease_name = %s", name)[0]
            report(
                outcome == "fenced LF001" and written == 0 and successor.token > zombie_token,
                "a zombie stopped past its TTL: its fenced write after the takeover raises FencedOff, nothing written",
                f"zombie said {outcome!r}, {written} rows written",
            )
            report(ending == "lost", "the zombie's helper reports the loss once it runs again", repr(ending))
    finally:
        child.kill()
        child.wait()


def test_outage():
    name = PREFIX + "outage"
    lost_at = []
    try:
        with pglease.hold(CONNINFO, name, ttl=4, on_lost=lambda l: lost_at.append(time.time())) as lease:
            time.sleep(1.5)  # past the first heartbeat
            subprocess.run(os.environ["CLIENTS_SERVER_STOP"], shell=True, check=True)
            stopped = time.time()
            lease.lost.wait(5)
        report(False, "outage: the with block raises LeaseLost")
    except pglease.LeaseLost:
        report(True, "outage: the with block raises LeaseLost")
    finally:
        subprocess.run(os.environ["CLIENTS_SERVER_START"], shell=True, check=True)
    expires = lease_row(name)[3]
    margin = expires - lost_at[0] if lost_at else None
    report(
        margin is not None and margin >= 0.6 and lost_at[0] - stopped < 4,
        f"the database stops: loss signalled {margin and round(margin * 1000)} ms before the lease expires on the server (grace 800 + TTL/10 400 expected, at least 600 required; TTL 4 s), "
        f"{lost_at and round((lost_at[0] - stopped) * 1000)} ms after the outage began",
    )


def leader_count(name):
    return admin("SELECT count(*) FROM lease.leader(%s)", name)[0]


def wait_for_waiter(name, mode, seconds=5):
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if admin("SELECT count(*) FROM lease.waiters WHERE name = %s AND mode = %s", name, mode)[0]:
            return True
        time.sleep(0.02)
    return False


def hold_in_thread(result, *args, **kwargs):
    """Holds in a thread of its own: result gets ("acquired", token) or the error's name."""

    def run():
        try:
            with pglease.hold(*args, **kwargs) as lease:
                result.append(("acquired", lease.token))
        except Exception as error:
            result.append((type(error).__name__, None))

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_semaphore():
    name = PREFIX + "semaphore"
    with contextlib.ExitStack() as stack:
        a = stack.enter_context(pglease.hold(CONNINFO, name, permits=2, ttl=5))
        second = pglease.hold(CONNINFO, name, permits=2, ttl=5)
        b = second.__enter__()
        holders = leader_count(name)
        try:
            with pglease.hold(CONNINFO, name, permits=2, ttl=5, wait=0.3):
                third = "acquired"
        except pglease.NotAcquired:
            third = "NotAcquired"
        report(
            a.token != b.token and holders == 2 and third == "NotAcquired",
            "semaphore: two holders of 2 permits, each with its own token; a third is not acquired after waiting 0.3 s",
            f"tokens {a.token} {b.token}, {holders} holders, third: {third}",
        )
        result = []
        thread = hold_in_thread(result, CONNINFO, name, permits=2, ttl=5, wait=10)
        queued = wait_for_waiter(name, "semaphore")
        waited = list(result)
        second.__exit__(None, None, None)
        thread.join(10)
        report(
            queued and not waited and result and result[0][0] == "acquired" and result[0][1] > b.token,
            "semaphore: a third holder waits in the server's queue and gets the permit the second gives back",
            f"queued {queued}, before: {waited}, after: {result}",
        )
    report(leader_count(name) == 0, "semaphore: every permit released at the end of the blocks")


def test_semaphore_revoked():
    name = PREFIX + "semaphore-revoked"
    lost = []
    try:
        with pglease.hold(CONNINFO, name, permits=3, ttl=2, on_lost=lambda l: lost.append(1)) as permit, \
                psycopg.connect(CONNINFO, prepare_threshold=None) as conn:
            with permit.transaction(conn):
                conn.execute("INSERT INTO client_log VALUES (%s, 'under the permit')", (name,))
            admin("SELECT lease.lease_revoke(%s)", name)
            signalled = permit.lost.wait(3)
            report(signalled and lost == [1], "semaphore: a revoked permit is signalled as a loss", permit.lost_reason)
            try:
                with permit.transaction(conn):
                    conn.execute("INSERT INTO client_log VALUES (%s, 'after the revoke')", (name,))
                outcome = "written"
            except pglease.FencedError as error:
                outcome = "FencedError" if error.detail else "FencedError without DETAIL"
            conn.rollback()
            written = admin("SELECT count(*) FROM client_log WHERE lease_name = %s", name)[0]
            report(
                outcome == "FencedError" and written == 1,
                "semaphore: the revoked permit's next fenced transaction raises FencedError (with DETAIL), nothing written",
                f"{outcome}, {written} rows",
            )
    except pglease.LeaseLost:
        pass


def test_shared():
    name = PREFIX + "shared"
    with pglease.hold(CONNINFO, name, shared=True, ttl=5) as reader1, \
            pglease.hold(CONNINFO, name, shared=True, ttl=5) as reader2:
        together = leader_count(name)
        result = []
        thread = hold_in_thread(result, CONNINFO, name, ttl=5, wait=10)
        queued = wait_for_waiter(name, "exclusive")
        time.sleep(0.2)
        waited = list(result)
        still = leader_count(name)
        report(
            together == 2 and reader1.token != reader2.token and queued and not waited and still == 2,
            "shared: two shared holders together, each with its own token, while an exclusive request waits",
            f"{together} holders, then {still}; exclusive queued {queued}, got {waited}",
        )
    thread.join(10)
    report(
        result and result[0][0] == "acquired",
        "shared: the exclusive request is granted once both shared holders have released",
        result,
    )


def test_acquire_all():
    try:
        acquire_all()
    except pglease.LeaseLost:  # the end of the block, after the revoke
        pass


def acquire_all():
    a, b, c = PREFIX + "acct:b", PREFIX + "acct:a", PREFIX + "acct:c"
    with pglease.hold_all(CONNINFO, [a, b], ttl=2) as both, psycopg.connect(CONNINFO, prepare_threshold=None) as conn:
        server = {n: int(t) for n, t in (x.split("=") for x in admin(
            "SELECT array_agg(name || '=' || token) FROM lease.leases WHERE name IN (%s, %s) AND owner IS NOT NULL", a, b)[0])}
        report(
            list(both.tokens) == [a, b] and both.tokens == server and both.token_of(a) != both.token_of(b),
            "acquire all: one token per name, aligned with the names given, each the server's",
            f"helper {both.tokens}, server {server}",
        )
        with both.transaction(conn):
            for name in (a, b):
                conn.execute(
                    "INSERT INTO client_work (lease_name, note, fence_token) VALUES (%s, 'both', %s)",
                    (name, both.token_of(name)),
                )
        try:
            with pglease.hold_all(CONNINFO, [c, b], ttl=5, wait=0.2):
                other = "acquired"
        except pglease.NotAcquired:
            other = "NotAcquired"
        c_state = lease_row(c)
        report(
            other == "NotAcquired" and (c_state is None or c_state[2] != "held"),
            "acquire all: an overlapping set is not acquired, and holds nothing (all or none)",
            f"{other}, {c} is {c_state}",
        )
        admin("SELECT lease.lease_revoke(%s)", b)
        try:
            with both.transaction(conn):
                conn.execute(
                    "INSERT INTO client_work (lease_name, note, fence_token) VALUES (%s, 'after', %s)",
                    (a, both.token_of(a)),
                )
            outcome = "written"
        except pglease.FencedError:
            outcome = "FencedError"
        conn.rollback()
        written = admin("SELECT count(*) FROM client_work WHERE lease_name IN (%s, %s)", a, b)[0]
        report(
            outcome == "FencedError" and written == 2,
            "acquire all: fenced rows under each name's own token; one name revoked, the next fenced transaction raises FencedError",
            f"{outcome}, {written} rows",
        )
        both.lost.wait(3)


def test_values():
    try:
        values()
    except pglease.LeaseLost:  # the end of the block, after the revoke
        pass


def values():
    name = PREFIX + "leader"
    with pglease.hold(CONNINFO, name, owner="py-leader", ttl=2) as lease, \
            psycopg.connect(CONNINFO, autocommit=True, prepare_threshold=None) as conn:
        stored = lease.set_value({"addr": "10.0.0.5:5432"})
        holders = pglease.leader(conn, name)
        report(
            stored is True and len(holders) == 1 and holders[0].owner == "py-leader" and holders[0].token == lease.token
            and holders[0].value == {"addr": "10.0.0.5:5432"} and holders[0].expires_at is not None,
            "set_value, then leader(name): owner, token, the value published, expires_at",
            f"{stored}, {holders}",
        )
        admin("SELECT lease.lease_revoke(%s)", name)
        lease.lost.wait(3)  # set_value still answers after the loss: false
        stale = lease.set_value({"addr": "stale"})
        stale_conn = lease.set_value({"addr": "stale"}, conn)
        report(
            stale is False and stale_conn is False and pglease.leader(CONNINFO, name) == [],
            "set_value with a stale token returns False (on the helper's connection and on yours), and publishes nothing",
            f"{stale}, {stale_conn}",
        )


def test_session_primitives():
    with pglease.session(CONNINFO, ttl=5) as session, pglease.session(CONNINFO, ttl=5) as other:
        names = [PREFIX + "s-acct:2", PREFIX + "s-acct:1"]
        held = session.acquire_all(names)
        tokens = admin("SELECT array_agg(token ORDER BY array_position(%s::text[], name)) FROM lease.leases WHERE name = ANY(%s::text[]) AND session = %s",
                       names, names, session.id)[0]
        report(
            list(held.tokens.values()) == tokens and list(held.tokens) == names,
            "session: acquire_all gives a token per name, aligned with the names",
            f"{held.tokens}, server {tokens}",
        )
        sem = PREFIX + "s-semaphore"
        permit = session.acquire(sem, permits=1)
        try:
            other.acquire(sem, permits=1, wait=0.2)
            second = "acquired"
        except pglease.NotAcquired:
            second = "NotAcquired"
        shared = PREFIX + "s-shared"
        r1 = session.acquire(shared, shared=True)
        r2 = other.acquire(shared, shared=True)
        published = r1.set_value("reader-1")
        values = sorted(str(h.value) for h in pglease.leader(CONNINFO, shared))
        report(
            second == "NotAcquired" and permit.token > 0 and r1.token != r2.token and published and values == ["None", "reader-1"],
            "session: a semaphore permit (a second session is not acquired) and two shared grants, one with a value",
            f"{second}, {values}",
        )
    report(leader_count(sem) == 0 and leader_count(shared) == 0 and leader_count(names[0]) == 0,
           "session: closing the sessions ends their permits, shared and all-or-none grants")


def test_primitives_bad_input():
    checks = [
        (lambda: pglease.hold(UNREACHABLE, "x", permits=2, shared=True), "pglease: permits and shared exclude each other"),
        (lambda: pglease.hold(UNREACHABLE, "x", permits=0), "pglease: permits must be between 1 and 10000"),
        (lambda: pglease.hold_all(UNREACHABLE, []), "pglease: no lease names given"),
        (lambda: pglease.hold_all(UNREACHABLE, ["a", ""]), "pglease: the lease name must not be empty"),
    ]
    for call, message in checks:
        try:
            call()
            got = "no error"
        except ValueError as error:
            got = str(error)
        report(got == message, f"bad input refused before any round trip: {message}", got)


def main():
    tests = [
        test_acquire_release_bigint,
        test_release_on_exception,
        test_not_acquired,
        test_waiter_woken,
        test_errors,
        test_bad_input,
        test_session,
        test_pool,
        test_heartbeat,
        test_fence,
        test_revoked,
        test_semaphore,
        test_semaphore_revoked,
        test_shared,
        test_acquire_all,
        test_values,
        test_session_primitives,
        test_primitives_bad_input,
        test_zombie,
        test_outage,
    ]
    for test in tests:
        try:
            test()
        except Exception as error:  # one broken test must not hide the others
            report(False, f"{test.__name__} ran", f"{type(error).__name__}: {error}")
    print("# end", flush=True)


if __name__ == "__main__":
    if sys.argv[1:2] == ["--zombie"]:
        zombie_child(sys.argv[2])
    else:
        main()
