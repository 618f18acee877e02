"""Hold a `lease` (the PostgreSQL extension) from Python with psycopg 3.

    with pglease.hold("dbname=app", "billing", ttl=20) as lease:
        with lease.transaction(conn):      # fenced: LF001 raises pglease.FencedError
            conn.execute("INSERT ...")

The helper acquires the lease on a connection of its own, heartbeats it there
every TTL/3 from a background thread, and sets ``lease.lost`` (and calls
``on_lost``) before the server could let the lease expire. The timing model is
that of ``pg_lease run``; see docs/clients.md in the lease repository.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import secrets
import select
import socket
import threading
import time
from datetime import datetime, timedelta
from typing import Callable, Iterator, List, NamedTuple, Optional, Sequence, Union

import psycopg
from psycopg.conninfo import conninfo_to_dict
from psycopg.pq import TransactionStatus

__all__ = [
    "hold",
    "hold_all",
    "leader",
    "Holder",
    "Lease",
    "session",
    "Session",
    "SessionLease",
    "FencedError",
    "FencedOff",
    "NotAcquired",
    "LeaseLost",
    "watch",
    "Event",
]

log = logging.getLogger("pglease")

Duration = Union[float, int, timedelta]

MIN_TTL = timedelta(milliseconds=100)
# The longest the helper tries to release the lease when the block ends.
MAX_RELEASE_WAIT = 5.0

_ACQUIRE = "SELECT lease.lease_acquire(%s, %s, %s::pg_catalog.interval, %s::pg_catalog.interval)"
_HEARTBEAT = "SELECT lease.lease_heartbeat(%s, %s::pg_catalog.int8)"
_RELEASE = "SELECT lease.lease_release(%s, %s::pg_catalog.int8)"
# Checks the lease now (LF001 at once for a stale token, and no new grant can
# commit until this transaction ends), and gives fence triggers the token for
# the rest of the transaction (INSERT, UPDATE and DELETE alike).
_FENCE = (
    "SELECT lease.fenced_write(%(name)s, %(token)s::pg_catalog.int8), "
    "lease.set_fence_token(%(token)s::pg_catalog.int8)"
)
# Semaphore permits and shared grants (lease 1.3): heartbeat, release and the
# fence take their tokens as they take a lease's.
_SEMAPHORE_ACQUIRE = (
    "SELECT lease.semaphore_acquire(%s, %s, %s::pg_catalog.int4, %s::pg_catalog.interval, %s::pg_catalog.interval)"
)
_SHARED_ACQUIRE = "SELECT lease.lease_acquire_shared(%s, %s, %s::pg_catalog.interval, %s::pg_catalog.interval)"
# All or none: the tokens aligned with the names, or NULL holding nothing.
_ACQUIRE_ALL = "SELECT lease.lease_acquire_all(%s::pg_catalog.text[], %s, %s::pg_catalog.interval, %s::pg_catalog.interval)"
# Several names at once, each with its own token: every heartbeat (or release)
# runs, and the answer is true only if every one was.
_HEARTBEAT_ALL = (
    "SELECT pg_catalog.bool_and(lease.lease_heartbeat(n, t)) "
    "FROM ROWS FROM (pg_catalog.unnest(%s::pg_catalog.text[]), pg_catalog.unnest(%s::pg_catalog.int8[])) AS u(n, t)"
)
_RELEASE_ALL = (
    "SELECT pg_catalog.bool_and(lease.lease_release(n, t)) "
    "FROM ROWS FROM (pg_catalog.unnest(%s::pg_catalog.text[]), pg_catalog.unnest(%s::pg_catalog.int8[])) AS u(n, t)"
)
# Each name checked with its own token, in the server's order (by bytes), as
# lease_acquire_all takes them. No single token for fence triggers: rows carry
# their name's token (token_of).
_FENCE_ALL = (
    "SELECT pg_catalog.count(lease.fenced_write(n, t)) "
    "FROM ROWS FROM (pg_catalog.unnest(%s::pg_catalog.text[]), pg_catalog.unnest(%s::pg_catalog.int8[])) AS u(n, t)"
)
_SET_VALUE = "SELECT lease.lease_set_value(%s, %s::pg_catalog.int8, %s::pg_catalog.jsonb)"
_LEADER = "SELECT owner, token, value, expires_at FROM lease.leader(%s)"


# The helpers' messages for bad input, the same in every helper of clients/
# (docs/clients.md, "Bad input"); each is raised before any round trip.
_NO_NAME = "pglease: the lease name must not be empty"
_SHORT_TTL = "pglease: the ttl must be at least 100 ms"
_NEGATIVE_WAIT = "pglease: wait must not be negative"
_BAD_GRACE = "pglease: grace must be between 0 and ttl/2"
_NO_CONNECTION = "pglease: no connection given"
_MALFORMED = "pglease: malformed connection string: "
_BAD_PERMITS = "pglease: permits must be between 1 and 10000"
_PERMITS_AND_SHARED = "pglease: permits and shared exclude each other"
_NO_NAMES = "pglease: no lease names given"
_ONE_NAME = "pglease: set_value needs a grant of one name"
_BAD_SINCE = "pglease: since must be a position XID/N (an event's position) or a datetime"


class FencedError(psycopg.DatabaseError, code="LF001"):
    """SQLSTATE LF001: the server rejected a write made under a stale or expired token.

    Registered with psycopg when pglease is imported, so every statement that
    fails with LF001 (``lease.fenced_write``, a ``lease.fence_trigger``, or
    ``Lease.fence``) raises it, on any connection. It is a
    ``psycopg.DatabaseError``; the transaction is aborted. Stop working under
    the lease: another holder has it, or will. ``detail`` is the server's
    DETAIL (which grant, since when), and ``str()`` ends with it.
    """

    @property
    def detail(self) -> Optional[str]:
        """The server's DETAIL."""
        return self.diag.message_detail

    def __str__(self) -> str:
        message = super().__str__()
        detail = self.detail
        if detail and detail not in message:
            message = f"{message}\nDETAIL: {detail}"
        return message


#: The name of :class:`FencedError` before 0.2; kept so that ``except
#: pglease.FencedOff`` goes on working. Deprecated: use FencedError.
FencedOff = FencedError


class NotAcquired(Exception):
    """Another owner held the lease for the whole ``wait``."""


class LeaseLost(Exception):
    """The lease can no longer be trusted: a heartbeat was refused, or none
    succeeded in time. Raised by ``Lease.check()``, and when the ``with`` block
    ends normally after a loss."""


def _seconds(value: Duration, what: str) -> float:
    if isinstance(value, timedelta):
        return value.total_seconds()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise TypeError(f"{what} must be a number of seconds or a timedelta, not {type(value).__name__}")
    return float(value)


def _check_conninfo(conninfo: object) -> None:
    """Refuses a missing or malformed libpq connection string before any round trip."""
    if conninfo is None:
        raise ValueError(_NO_CONNECTION)
    if not isinstance(conninfo, str):
        raise TypeError(f"the connection must be a libpq connection string, not {type(conninfo).__name__}")
    try:
        conninfo_to_dict(conninfo)
    except psycopg.ProgrammingError as error:
        raise ValueError(_MALFORMED + str(error).strip()) from None


def _clamp(value: float, low: float, high: float) -> float:
    return max(low, min(high, value))


def _check_kind(permits: Optional[int], shared: bool) -> None:
    if permits is not None and (isinstance(permits, bool) or not isinstance(permits, int) or not 1 <= permits <= 10000):
        raise ValueError(_BAD_PERMITS)
    if permits is not None and shared:
        raise ValueError(_PERMITS_AND_SHARED)


def _check_names(names: Sequence[str]) -> List[str]:
    if isinstance(names, str):
        raise TypeError("names must be a sequence of lease names, not a str")
    names = list(names) if names is not None else []
    if not names:
        raise ValueError(_NO_NAMES)
    for name in names:
        if not isinstance(name, str) or not name:
            raise ValueError(_NO_NAME)
    return names


def _by_bytes(pairs) -> tuple:
    """(names, tokens) sorted by the names' UTF-8 bytes: the server's order."""
    ordered = sorted(pairs, key=lambda pair: pair[0].encode())
    return [n for n, _ in ordered], [t for _, t in ordered]


def _fence_pairs(conn, pairs) -> None:
    if conn is None:
        raise ValueError(_NO_CONNECTION)
    if conn.autocommit and conn.info.transaction_status == TransactionStatus.IDLE:
        raise ValueError(
            "fence() needs an open transaction: use lease.transaction(conn), "
            "conn.transaction(), or a connection with autocommit off"
        )
    if len(pairs) == 1:
        conn.execute(_FENCE, {"name": pairs[0][0], "token": pairs[0][1]})
    else:
        conn.execute(_FENCE_ALL, _by_bytes(pairs))


class Holder(NamedTuple):
    """One live holder of a name, from :func:`leader`: the exclusive holder,
    or one holder of a semaphore permit or shared grant."""

    owner: str
    token: int
    value: object  # what it published (set_value), None before
    expires_at: object  # a datetime


def leader(conn: Union[str, "psycopg.Connection"], name: str) -> List[Holder]:
    """Who holds ``name`` now and what each published (``lease.leader``): one
    :class:`Holder` for an exclusive lease, one per holder of a semaphore or
    shared lease, none when nobody holds it. ``conn`` is a connection of yours
    or a libpq connection string."""
    if not isinstance(name, str) or not name:
        raise ValueError(_NO_NAME)
    if conn is None:
        raise ValueError(_NO_CONNECTION)
    if isinstance(conn, str):
        _check_conninfo(conn)
        with psycopg.connect(conn, autocommit=True, prepare_threshold=None) as own:
            return [Holder(*row) for row in own.execute(_LEADER, (name,)).fetchall()]
    return [Holder(*row) for row in conn.execute(_LEADER, (name,)).fetchall()]


class _Grants:
    """What a held lease and a session's grant share: one name and token, or
    several (all or none), each name fenced with its own token."""

    _pairs: list

    @property
    def token(self) -> int:
        """The fencing token of this grant (an exact ``int``)."""
        if not self._pairs:
            raise RuntimeError("the lease has not been acquired")
        if len(self._pairs) > 1:
            raise RuntimeError("a grant of several names has a token per name: use token_of(name) or tokens")
        return self._pairs[0][1]

    @property
    def tokens(self) -> "dict[str, int]":
        """Each name's token, in the order the names were given."""
        return dict(self._pairs)

    def token_of(self, name: str) -> int:
        """The token of ``name``, one of the names held."""
        for held, token in self._pairs:
            if held == name:
                return token
        raise KeyError(name)

    def fence(self, conn: psycopg.Connection) -> None:
        """Fence the transaction open on ``conn`` with this lease's token.

        Checks the lease at once (:class:`FencedError` if the token is stale or
        the lease expired), holds off any new grant of the lease until the
        transaction ends, and sets ``lease.fence_token`` for the rest of the
        transaction, so fence triggers accept its INSERTs, UPDATEs and DELETEs.
        A grant of several names checks each with its own token and sets no
        ``lease.fence_token``: rows then carry their name's token (``token_of``).
        """
        _fence_pairs(conn, self._pairs)

    @contextlib.contextmanager
    def transaction(self, conn: psycopg.Connection) -> Iterator[psycopg.Transaction]:
        """``conn.transaction()``, fenced with :meth:`fence`: one call."""
        if conn is None:
            raise ValueError(_NO_CONNECTION)
        with conn.transaction() as tx:
            self.fence(conn)
            yield tx

    def set_value(self, value, conn: Optional[psycopg.Connection] = None) -> bool:
        """Publishes ``value`` (anything JSON: an address, a role) for this
        grant (``lease.lease_set_value``), for :func:`leader` and the
        ``value_set`` event; False, and nothing changed, if the token is no
        longer live. With ``conn``, in its transaction; without, on the
        helper's connection."""
        if len(self._pairs) != 1:
            raise ValueError(_ONE_NAME)
        params = (self._pairs[0][0], self._pairs[0][1], json.dumps(value))
        if conn is not None:
            return bool(conn.execute(_SET_VALUE, params).fetchone()[0])
        return bool(self._helper_query(_SET_VALUE, params))


class Lease(_Grants):
    """A held lease, semaphore permit or shared grant, or several leases held
    all or none. Create it with :func:`hold` or :func:`hold_all`."""

    def __init__(
        self,
        conninfo: str,
        name: str,
        *,
        owner: Optional[str] = None,
        ttl: Duration = 20,
        wait: Duration = 0,
        grace: Optional[Duration] = None,
        on_lost: Optional[Callable[["Lease"], None]] = None,
        permits: Optional[int] = None,
        shared: bool = False,
        names: Optional[Sequence[str]] = None,
    ):
        _check_conninfo(conninfo)
        if names is not None:
            names = _check_names(names)
            name = ", ".join(names)
        elif not isinstance(name, str) or not name:
            raise ValueError(_NO_NAME)
        _check_kind(permits, shared)
        ttl_s = _seconds(ttl, "ttl")
        if ttl_s < MIN_TTL.total_seconds():
            raise ValueError(f"{_SHORT_TTL}, not {ttl_s} s")
        wait_s = _seconds(wait, "wait")
        if wait_s < 0:
            raise ValueError(_NEGATIVE_WAIT)
        grace_s = ttl_s / 5 if grace is None else _seconds(grace, "grace")
        if not 0 <= grace_s <= ttl_s / 2:
            raise ValueError(_BAD_GRACE)

        self.name = name
        #: The names held: one, or those of hold_all in their order.
        self.names = names if names is not None else [name]
        self.permits = permits
        self.shared = bool(shared)
        self.owner = owner or f"{socket.gethostname()}:{os.getpid()}:{secrets.token_hex(4)}"
        self.ttl = timedelta(seconds=ttl_s)
        #: Set when the lease is lost; ``lost.wait()`` blocks until then.
        self.lost = threading.Event()
        self.lost_reason: Optional[str] = None

        self._conninfo = conninfo
        self._wait = wait_s
        self._on_lost = on_lost
        self._token: Optional[int] = None
        self._pairs: list = []
        # Every period below counts from when the last successful acquire or
        # heartbeat was sent (docs/cli.md, "How run keeps the command inside
        # the lease"): the server read its clock later than that.
        self._interval = ttl_s / 3
        self._trust = ttl_s - ttl_s / 10 - grace_s
        self._retry = _clamp(ttl_s / 20, 0.05, 1.0)
        self._poll = _clamp(ttl_s / 10, 0.05, 1.0)
        self._last_success = 0.0

        self._conn: Optional[psycopg.AsyncConnection] = None
        self._thread: Optional[threading.Thread] = None
        self._loop: Optional[asyncio.AbstractEventLoop] = None
        self._stop: Optional[asyncio.Event] = None
        self._started = threading.Event()
        self._start_error: Optional[BaseException] = None

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the lease has been lost."""
        if self.lost.is_set():
            raise LeaseLost(f'lease "{self.name}" lost: {self.lost_reason}')

    def _helper_query(self, query: str, params: tuple):
        """One statement on the helper's own connection, from the caller's thread:
        the server's answer, even after a loss (a stale token answers false)."""
        if self._loop is None or self._thread is None or not self._thread.is_alive():
            raise RuntimeError("the lease is not held")
        future = asyncio.run_coroutine_threadsafe(
            self._call(query, params, time.monotonic() + self._interval), self._loop
        )
        return future.result()

    # -- the with statement ---------------------------------------------------

    def __enter__(self) -> "Lease":
        if self._thread is not None:
            raise RuntimeError("a Lease can be entered once")
        self._thread = threading.Thread(target=self._thread_main, name=f"pglease {self.name}", daemon=True)
        self._thread.start()
        self._started.wait()
        if self._start_error is not None:
            self._thread.join()
            raise self._start_error
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        assert self._loop is not None and self._stop is not None and self._thread is not None
        self._loop.call_soon_threadsafe(self._stop.set)
        # Bounded: an in-flight heartbeat ends by TTL/3, the release within 5 s.
        self._thread.join()
        if exc_type is None:
            self.check()

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "held" if self._token is not None else "not acquired"
        return f"<pglease.Lease {self.name!r} owner={self.owner!r} token={self._token} {state}>"

    # -- the background thread ------------------------------------------------

    def _thread_main(self) -> None:
        # psycopg's async connections need a selector loop (on Windows too).
        loop = asyncio.SelectorEventLoop()
        try:
            loop.run_until_complete(self._main())
        except BaseException as error:
            if not self._started.is_set():
                self._start_error = error
            raise
        finally:
            loop.close()
            self._started.set()  # never leave __enter__ waiting

    async def _main(self) -> None:
        self._loop = asyncio.get_running_loop()
        self._stop = asyncio.Event()
        try:
            await self._acquire()
        except BaseException as error:  # handed to the caller of __enter__
            self._start_error = error
            await self._disconnect()
            self._started.set()
            return
        self._started.set()
        try:
            await self._keep()
            if self.lost.is_set():
                await self._disconnect()
                await self._stop.wait()  # until __exit__
            else:
                await self._release()
        finally:
            await self._disconnect()

    async def _acquire(self) -> None:
        give_up_at = time.monotonic() + self._wait
        while True:
            sent = time.monotonic()
            # The server queues waiters (first come, first served) and wakes the
            # first when the lease frees up. Each call waits at most half the
            # trust window: a grant later than the whole window could not be
            # trusted at all, since the lease's TTL may have started when the
            # call was sent.
            wait = timedelta(seconds=max(0.0, min(give_up_at - sent, self._trust / 2)))
            try:
                token = await self._call(*self._acquisition(wait), sent + self._trust)
            except psycopg.OperationalError:
                if time.monotonic() >= give_up_at:
                    raise
                token = None
            if token is not None:
                tokens = token if isinstance(token, list) else [token]
                self._pairs = list(zip(self.names, tokens))
                self._token = tokens[0]
                self._last_success = sent
                return
            now = time.monotonic()
            if now >= give_up_at:
                raise NotAcquired(f'lease "{self.name}" not acquired: another owner holds it')
            if now < sent + wait.total_seconds():  # refused early (or failed): do not spin
                await asyncio.sleep(min(self._poll, give_up_at - now))

    def _acquisition(self, wait: timedelta) -> tuple:
        """The acquire's statement and parameters."""
        if len(self.names) > 1:
            return _ACQUIRE_ALL, (self.names, self.owner, self.ttl, wait)
        if self.permits is not None:
            return _SEMAPHORE_ACQUIRE, (self.name, self.owner, self.permits, self.ttl, wait)
        if self.shared:
            return _SHARED_ACQUIRE, (self.name, self.owner, self.ttl, wait)
        return _ACQUIRE, (self.name, self.owner, self.ttl, wait)

    async def _keep(self) -> None:
        """Heartbeats until the block ends or the lease is lost."""
        assert self._stop is not None
        next_heartbeat = self._last_success + self._interval
        failing = False
        while True:
            now = time.monotonic()
            trust_ends = self._last_success + self._trust
            if now >= trust_ends:
                self._lose(f"no heartbeat succeeded for {now - self._last_success:.3f} s")
                return
            if now < next_heartbeat:
                try:
                    await asyncio.wait_for(self._stop.wait(), min(next_heartbeat, trust_ends) - now)
                    return
                except asyncio.TimeoutError:
                    continue
            try:
                renewed = await self._call(*self._renewal(), min(trust_ends, now + self._interval))
            except psycopg.Error as failure:
                if not failing:
                    log.warning('lease "%s": heartbeat failed: %s; retrying', self.name, str(failure).strip())
                failing = True
                next_heartbeat = time.monotonic() + self._retry
                continue
            if not renewed:
                self._lose("the heartbeat was refused (the lease was revoked, expired or taken over)")
                return
            if failing:
                log.warning('lease "%s": heartbeat succeeded again', self.name)
            failing = False
            self._last_success = now
            next_heartbeat = now + self._interval
            if self._stop.is_set():
                return

    def _renewal(self) -> tuple:
        """The heartbeat's statement and parameters."""
        if len(self._pairs) > 1:
            return _HEARTBEAT_ALL, _by_bytes(self._pairs)
        return _HEARTBEAT, (self.name, self._token)

    async def _release(self) -> None:
        deadline = min(time.monotonic() + MAX_RELEASE_WAIT, self._last_success + self.ttl.total_seconds())
        try:
            if len(self._pairs) > 1:
                released = await self._call(_RELEASE_ALL, _by_bytes(self._pairs), deadline)
            else:
                released = await self._call(_RELEASE, (self.name, self._token), deadline)
        except psycopg.Error as failure:
            log.warning('lease "%s": could not release it: %s; it expires on its own', self.name, failure)
            return
        if not released:
            self._lose("it was no longer held when released")

    def _lose(self, reason: str) -> None:
        self.lost_reason = reason
        log.warning('lease "%s" lost: %s', self.name, reason)
        self.lost.set()
        if self._on_lost is not None:
            try:
                self._on_lost(self)
            except Exception:
                log.exception('lease "%s": on_lost raised', self.name)

    async def _call(self, query: str, params: tuple, deadline: float):
        """One statement on the helper's own connection. A call with no answer
        by ``deadline`` is abandoned with its connection (OperationalError)."""
        try:
            return await asyncio.wait_for(self._call_now(query, params), max(0.0, deadline - time.monotonic()))
        except asyncio.TimeoutError:
            await self._disconnect()
            raise psycopg.OperationalError("no answer from the server in time") from None
        except psycopg.OperationalError:
            await self._disconnect()
            raise

    async def _call_now(self, query: str, params: tuple):
        if self._conn is None or self._conn.closed:
            # No named prepared statements: they break transaction-mode poolers.
            self._conn = await psycopg.AsyncConnection.connect(
                self._conninfo, autocommit=True, prepare_threshold=None
            )
        cursor = await self._conn.execute(query, params)
        row = await cursor.fetchone()
        return row[0] if row else None

    async def _disconnect(self) -> None:
        if self._conn is not None:
            await self._conn.close()
            self._conn = None


def hold(
    conninfo: str,
    name: str,
    *,
    owner: Optional[str] = None,
    ttl: Duration = 20,
    wait: Duration = 0,
    grace: Optional[Duration] = None,
    on_lost: Optional[Callable[[Lease], None]] = None,
    permits: Optional[int] = None,
    shared: bool = False,
) -> Lease:
    """Hold lease ``name`` for the duration of a ``with`` block.

    With ``permits=N``, one of the N permits of semaphore ``name``
    (``lease.semaphore_acquire``); with ``shared=True``, the lease in shared
    mode beside other shared holders (``lease.lease_acquire_shared``). Either
    way the grant has its own token, heartbeat, loss signal and fence.

    ``conninfo`` is a libpq connection string or URI for the helper's own
    connection. Durations are seconds or ``timedelta``s. ``wait`` is how long
    to wait in the server's queue while another owner holds the lease, then
    :class:`NotAcquired`. The lease is lost (``lease.lost`` set, ``on_lost``
    called from the helper's thread) when a heartbeat is refused, or when none
    has succeeded for ``ttl - ttl/10 - grace`` (``grace`` defaults to ttl/5),
    which leaves your code ``grace`` to stop before the server could let the
    lease expire. ``owner`` defaults to ``host:pid:random``.
    """
    return Lease(
        conninfo, name, owner=owner, ttl=ttl, wait=wait, grace=grace, on_lost=on_lost, permits=permits, shared=shared
    )


def hold_all(
    conninfo: str,
    names: Sequence[str],
    *,
    owner: Optional[str] = None,
    ttl: Duration = 20,
    wait: Duration = 0,
    grace: Optional[Duration] = None,
    on_lost: Optional[Callable[[Lease], None]] = None,
) -> Lease:
    """Hold every lease of ``names`` or none (``lease.lease_acquire_all``) for
    the duration of a ``with`` block: :class:`NotAcquired` after ``wait``,
    holding nothing. ``tokens`` and ``token_of(name)`` give each name's token;
    the fenced transaction checks every name with its own token. One heartbeat
    statement renews them all; the loss of any is the loss of the whole."""
    return Lease(conninfo, "", owner=owner, ttl=ttl, wait=wait, grace=grace, on_lost=on_lost, names=names)


# -- sessions and pools ----------------------------------------------------------

_SESSION_OPEN = "SELECT lease.session_open(%s, %s::pg_catalog.interval, false)"
_SESSION_KEEPALIVE = "SELECT lease.session_keepalive(%s::pg_catalog.int8)"
_SESSION_CLOSE = "SELECT lease.session_close(%s::pg_catalog.int8)"
_SESSION_ACQUIRE = "SELECT lease.session_acquire(%s::pg_catalog.int8, %s, %s::pg_catalog.interval)"
_SESSION_SEMAPHORE_ACQUIRE = (
    "SELECT lease.session_semaphore_acquire(%s::pg_catalog.int8, %s, %s::pg_catalog.int4, %s::pg_catalog.interval)"
)
_SESSION_SHARED_ACQUIRE = "SELECT lease.session_acquire_shared(%s::pg_catalog.int8, %s, %s::pg_catalog.interval)"
_SESSION_ACQUIRE_ALL = (
    "SELECT lease.session_acquire_all(%s::pg_catalog.int8, %s::pg_catalog.text[], %s::pg_catalog.interval)"
)
_CLAIM = "SELECT name, token, state FROM lease.claim(%s, %s::pg_catalog.int8, %s::pg_catalog.int4)"
_SURPLUS = "SELECT name FROM lease.surplus(%s, %s::pg_catalog.int8) AS name"
_CHECKPOINT = "SELECT lease.checkpoint(%s, %s::pg_catalog.int8, %s::pg_catalog.jsonb)"


class Session(Lease):
    """A session of the lease extension (docs/concepts.md, "Sessions"): one
    keepalive, every TTL/3 from the helper's thread, for every lease acquired
    under it, with the loss signal of a :class:`Lease` (``lost``, ``check()``,
    ``on_lost``). Create it with :func:`session`; the ``with`` block closes it,
    which releases all its leases at once.

    ``acquire`` and ``claim`` return :class:`SessionLease` objects, which fence
    like a lease. They run on a second connection of the helper's (so a waiting
    acquire never delays a keepalive); call them from one thread at a time.
    The session is not bound to its connection, so it works through PgBouncer
    in transaction mode.
    """

    def __init__(self, conninfo: str, *, owner=None, ttl: Duration = 20, grace=None, on_lost=None):
        super().__init__(conninfo, "session", owner=owner, ttl=ttl, grace=grace, on_lost=on_lost)
        self._ops: Optional[psycopg.Connection] = None
        self._ops_lock = threading.Lock()

    @property
    def id(self) -> int:
        """The session's id."""
        if self._token is None:
            raise RuntimeError("the session has not been opened")
        return self._token

    def __repr__(self) -> str:
        state = "lost" if self.lost.is_set() else "open" if self._token is not None else "not opened"
        return f"<pglease.Session {self._token} owner={self.owner!r} {state}>"

    def check(self) -> None:
        """Raise :class:`LeaseLost` if the session has been lost."""
        if self.lost.is_set():
            raise LeaseLost(f"session {self._token} lost: {self.lost_reason}")

    def __exit__(self, exc_type, exc, tb) -> None:
        try:
            super().__exit__(exc_type, exc, tb)
        finally:
            with self._ops_lock:
                if self._ops is not None:
                    self._ops.close()
                    self._ops = None

    def acquire(
        self, name: str, *, wait: Duration = 0, permits: Optional[int] = None, shared: bool = False
    ) -> "SessionLease":
        """Acquires lease ``name`` under the session, waiting up to ``wait`` in
        the server's queue; :class:`NotAcquired` after it. The lease needs no
        heartbeat of its own: it is live while the session is. ``permits`` and
        ``shared`` as for :func:`hold`."""
        if not isinstance(name, str) or not name:
            raise ValueError(_NO_NAME)
        _check_kind(permits, shared)
        wait_s = _seconds(wait, "wait")
        if wait_s < 0:
            raise ValueError(_NEGATIVE_WAIT)
        wait_td = timedelta(seconds=wait_s)
        if permits is not None:
            token = self._query(_SESSION_SEMAPHORE_ACQUIRE, (self.id, name, permits, wait_td))[0][0]
        elif shared:
            token = self._query(_SESSION_SHARED_ACQUIRE, (self.id, name, wait_td))[0][0]
        else:
            token = self._query(_SESSION_ACQUIRE, (self.id, name, wait_td))[0][0]
        if token is None:
            raise NotAcquired(f'lease "{name}" not acquired: another owner holds it')
        return SessionLease(self, name, token, None)

    def acquire_all(self, names: Sequence[str], *, wait: Duration = 0) -> "SessionLease":
        """Acquires every lease of ``names`` under the session, or none
        (``lease.session_acquire_all``): one :class:`SessionLease` with a token
        per name (``tokens``, ``token_of``); :class:`NotAcquired` after ``wait``."""
        names = _check_names(names)
        wait_s = _seconds(wait, "wait")
        if wait_s < 0:
            raise ValueError(_NEGATIVE_WAIT)
        tokens = self._query(_SESSION_ACQUIRE_ALL, (self.id, names, timedelta(seconds=wait_s)))[0][0]
        if tokens is None:
            raise NotAcquired(f"leases {', '.join(names)} not acquired: another owner holds one of them")
        return SessionLease(self, ", ".join(names), None, None, pairs=list(zip(names, tokens)))

    def claim(self, pool: str, *, max: Optional[int] = None) -> "list[SessionLease]":
        """Claims free or orphaned resources of ``pool``, up to the session's
        fair share (and ``max``): the new grants, each with its token and the
        state its last holder checkpointed."""
        if not isinstance(pool, str) or not pool:
            raise ValueError("pglease: the pool name must not be empty")
        rows = self._query(_CLAIM, (pool, self.id, max))
        return [SessionLease(self, name, token, state) for name, token, state in rows]

    def surplus(self, pool: str) -> "list[str]":
        """The names this session holds in ``pool`` beyond its fair share, for
        it to release (``SessionLease.release()``, or ``release(name, token)``)."""
        if not isinstance(pool, str) or not pool:
            raise ValueError("pglease: the pool name must not be empty")
        return [row[0] for row in self._query(_SURPLUS, (pool, self.id))]

    def release(self, name: str, token: int) -> bool:
        """Releases one lease of the session (``lease.lease_release``)."""
        return bool(self._query(_RELEASE, (name, token))[0][0])

    def _query(self, query: str, params: tuple) -> list:
        self.check()
        with self._ops_lock:
            if self._ops is None or self._ops.closed:
                # No named prepared statements: they break transaction-mode poolers.
                self._ops = psycopg.connect(self._conninfo, autocommit=True, prepare_threshold=None)
            try:
                return self._ops.execute(query, params).fetchall()
            except psycopg.DatabaseError as error:
                if error.sqlstate == "LF003":
                    raise LeaseLost(f"session {self._token} lost: {str(error).strip()}") from error
                raise
            except psycopg.OperationalError:
                self._ops.close()
                raise

    # The background thread: session_open, session_keepalive, session_close.

    async def _acquire(self) -> None:
        sent = time.monotonic()
        self._token = await self._call(_SESSION_OPEN, (self.owner, self.ttl), sent + self._trust)
        self._pairs = [(self.name, self._token)]  # token: the session's id, as before
        self._last_success = sent

    def _renewal(self) -> tuple:
        return _SESSION_KEEPALIVE, (self._token,)

    async def _release(self) -> None:
        deadline = min(time.monotonic() + MAX_RELEASE_WAIT, self._last_success + self.ttl.total_seconds())
        try:
            await self._call(_SESSION_CLOSE, (self._token,), deadline)
        except psycopg.Error as failure:
            log.warning("session %s: could not close it: %s; it expires on its own", self._token, failure)


class SessionLease(_Grants):
    """A lease held under a :class:`Session`: live while the session is.
    ``state`` is what its pool resource's last holder checkpointed (None for
    ``Session.acquire``)."""

    def __init__(self, session: Session, name: str, token: Optional[int], state, pairs=None):
        self.session = session
        self.name = name
        self._pairs = pairs if pairs is not None else [(name, token)]
        self.names = [n for n, _ in self._pairs]
        self.state = state

    def _helper_query(self, query: str, params: tuple):
        return self.session._query(query, params)[0][0]

    def __repr__(self) -> str:
        return f"<pglease.SessionLease {self.name!r} tokens={self.tokens} session={self.session._token}>"

    @property
    def lost(self) -> threading.Event:
        """The session's loss signal."""
        return self.session.lost

    def check(self) -> None:
        """Raises :class:`LeaseLost` if the session has been lost."""
        self.session.check()

    def checkpoint(self, state, conn: Optional[psycopg.Connection] = None) -> bool:
        """Stores ``state`` (anything JSON) as the resource's progress, under
        this grant's token: False, and nothing changed, if the token is stale.
        With ``conn``, in its transaction (atomic with your writes there);
        without, on the helper's connection."""
        params = (self.name, self.token, json.dumps(state))
        if conn is None:
            return bool(self.session._query(_CHECKPOINT, params)[0][0])
        return bool(conn.execute(_CHECKPOINT, params).fetchone()[0])

    def release(self) -> bool:
        """Releases this lease now (the session keeps its others)."""
        if len(self._pairs) > 1:
            return bool(self.session._query(_RELEASE_ALL, _by_bytes(self._pairs))[0][0])
        return self.session.release(self.name, self.token)


def session(
    conninfo: str,
    *,
    owner: Optional[str] = None,
    ttl: Duration = 20,
    grace: Optional[Duration] = None,
    on_lost: Optional[Callable[[Session], None]] = None,
) -> Session:
    """Open a session for the duration of a ``with`` block: one keepalive for
    every lease acquired (``acquire``) or claimed (``claim``) under it, and the
    loss signal of :func:`hold`. The block's end closes the session, releasing
    all its leases at once."""
    return Session(conninfo, owner=owner, ttl=ttl, grace=grace, on_lost=on_lost)


# Watching events (docs/reference.md, "Resuming a watch"): every event has a
# position (xid, ordinal) in lease.history; the horizon says up to which
# transaction every event has arrived.
_LISTEN = "SELECT lease.listen_events()"
_HORIZON = "SELECT lease.events_horizon(%s)::pg_catalog.text"
_EVENTS_AFTER = (
    "SELECT xid::pg_catalog.text, ordinal, event, name, token, owner, session FROM lease.history "
    "WHERE CASE WHEN %(since)s::pg_catalog.timestamptz IS NULL "
    "           THEN (xid, ordinal) > (%(xid)s::pg_catalog.xid8, %(ordinal)s::pg_catalog.int8) "
    "           ELSE at >= %(since)s::pg_catalog.timestamptz END "
    "ORDER BY history.xid, history.ordinal"
)
_POSITION = re.compile(r"([0-9]+)/([0-9]+)")
# While events wait for their horizon, how often to ask for it; while nothing
# happens, how often to ask anyway (a partitioned connection shows itself by
# not answering), and how long an answer may take: for TCP itself
# (tcp_user_timeout), for connecting (connect_timeout), and for every call but
# the first horizon, which waits for the transactions in progress (a stalled
# server or relay that still acknowledges the bytes; _answer_within).
_HORIZON_INTERVAL = 0.05
_PROBE_INTERVAL = 5.0
_ANSWER_TIMEOUT_MS = 10000


@contextlib.contextmanager
def _answer_within(conn: psycopg.Connection, seconds: float) -> Iterator[None]:
    """Breaks conn if the calls made inside take longer than seconds. psycopg
    has no deadline for a call, and a stalled peer whose kernel still
    acknowledges the bytes defeats TCP's: a timer thread shuts the socket down
    (through a duplicate of its descriptor, so that libpq's stays open and
    its own), libpq reads the end of the connection, and the call raises
    OperationalError."""
    lock = threading.Lock()
    state = {"done": False, "expired": False}

    def expire() -> None:
        with lock:
            if state["done"]:
                return
            state["expired"] = True
            try:
                with socket.socket(fileno=os.dup(conn.pgconn.socket)) as sock:
                    sock.shutdown(socket.SHUT_RDWR)
            except (OSError, psycopg.Error):
                pass  # closed already: the call fails anyway

    timer = threading.Timer(seconds, expire)
    timer.daemon = True
    timer.start()
    try:
        yield
    except psycopg.OperationalError as error:
        if state["expired"]:
            raise psycopg.OperationalError(f"no answer from the server within {seconds:g} s") from error
        raise
    finally:
        with lock:
            state["done"] = True
        timer.cancel()


class Event(NamedTuple):
    """A lease event (docs/concepts.md, "Events and history"). ``position`` is
    ``"XID/N"``, to resume from; ``value`` is what an ``acquired`` or
    ``value_set`` event published (not kept in history: None when replayed)."""

    event: str
    name: Optional[str]
    token: Optional[int]
    owner: Optional[str]
    session: Optional[int]
    position: Optional[str]
    value: object = None
    replayed: bool = False


def _position_key(text: str) -> Optional[tuple]:
    match = _POSITION.fullmatch(text) if isinstance(text, str) else None
    if match is None or int(match.group(2)) >= 2**63:
        return None
    return (int(match.group(1)), int(match.group(2)))


def watch(conninfo: str, *, since: Union[str, datetime, None] = None, reconnect_interval: Duration = 1) -> Iterator[Event]:
    """Yield every lease event, in the order of their positions, each once,
    until the caller stops iterating; a lost or silent connection is replaced
    and what happened meanwhile is replayed from ``lease.history``.

    ``since``: start after a position (``event.position`` of an event seen
    earlier: resume there), or with the events recorded from a ``datetime`` on;
    by default with the transactions in progress when it connects. Needs lease
    1.4 and ``lease.record_history`` (events without a position come as they
    arrive)."""
    _check_conninfo(conninfo)
    resume = None
    since_time = None
    if isinstance(since, datetime):
        since_time = since
    elif since is not None:
        resume = _position_key(since)
        if resume is None:
            raise ValueError(_BAD_SINCE)
    retry = _seconds(reconnect_interval, "reconnect_interval")
    params = conninfo_to_dict(conninfo)
    # An answer that does not come (a partition) breaks the connection.
    extra = {} if "tcp_user_timeout" in params else {"tcp_user_timeout": _ANSWER_TIMEOUT_MS}
    if "connect_timeout" not in params:
        extra["connect_timeout"] = _ANSWER_TIMEOUT_MS // 1000
    state = {"resume": resume, "since_time": since_time}
    while True:
        try:
            with psycopg.connect(conninfo, autocommit=True, prepare_threshold=None, **extra) as conn:
                yield from _watch_connection(conn, state)
        except psycopg.OperationalError as error:
            log.warning("pglease: watch: connection lost (%s); reconnecting", str(error).strip())
            time.sleep(retry)


def _watch_connection(conn: psycopg.Connection, state: dict) -> Iterator[Event]:
    received: list = []
    conn.add_notify_handler(lambda n: received.append((n.channel, n.payload)))
    pending: dict = {}

    def pend(key, event):
        if state["resume"] is not None and key <= state["resume"]:
            return  # shown already
        pending.setdefault(key, event)

    answer_limit = _ANSWER_TIMEOUT_MS / 1000
    with _answer_within(conn, answer_limit):
        conn.execute(_LISTEN)
    # Writers that looked for a watcher before this one listened sent
    # nothing: wait for them, so that the replay has their events.
    horizon = int(conn.execute(_HORIZON, (True,)).fetchone()[0])
    if state["resume"] is None and state["since_time"] is None:
        state["resume"] = (horizon, 0)
    after = state["resume"] or (0, 0)
    since = None if state["resume"] is not None else state["since_time"]
    with _answer_within(conn, answer_limit):
        replay = conn.execute(_EVENTS_AFTER, {"since": since, "xid": str(after[0]), "ordinal": after[1]}).fetchall()
    for xid, ordinal, event, name, token, owner, session in replay:
        pend((int(xid), ordinal), Event(event, name, token, owner, session, f"{xid}/{ordinal}", None, True))
    requested = True
    last_call = time.monotonic()
    channel = f"lease_horizon_{conn.info.backend_pid}"
    while True:
        for ch, payload in received:
            if ch == channel:
                requested = False
                passed = (int(payload), 0)
                for key in sorted(k for k in pending if k < passed):
                    yield pending.pop(key)
                if state["resume"] is None or state["resume"] < passed:
                    state["resume"] = passed
                continue
            fields = json.loads(payload)
            position = fields.get("position")
            event = Event(fields["event"], fields.get("name"), fields.get("token"), fields.get("owner"),
                          fields.get("session"), position, fields.get("value"))
            key = _position_key(position) if position is not None else None
            if key is None:
                yield event  # not recorded in history: as it comes
            else:
                pend(key, event)
        received.clear()
        interval = _HORIZON_INTERVAL if pending and not requested else _PROBE_INTERVAL
        wait = last_call + interval - time.monotonic()
        if wait > 0:
            ready, _, _ = select.select([conn.fileno()], [], [], wait)
            if ready:
                conn.pgconn.consume_input()
                while (n := conn.pgconn.notifies()) is not None:
                    received.append((n.relname.decode(), n.extra.decode()))
                continue
        with _answer_within(conn, answer_limit):
            conn.execute(_HORIZON, (False,))
        requested = True
        last_call = time.monotonic()
