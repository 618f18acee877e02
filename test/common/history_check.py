#!/usr/bin/env python3
"""test/common/history_check.py: the history checker of the fault suites.

    python3 test/common/history_check.py [--slack-ms 1] [--lossy] LOG...
    python3 test/common/history_check.py --self-test

Every client of test/chaos, test/fleet, test/ha and test/netfault logs each
call it completed, one line per call; this checks those logs against the
guarantees of docs/concepts.md ("Guarantees") from the clients' side alone.
The format, the properties and why each is sound are in docs/operations.md
("The history checker"); in short:

    client <TAB> call <TAB> name <TAB> result <TAB> token <TAB> invoke_us <TAB>
    complete_us <TAB> ttl_ms <TAB> valid_until_us

  client     who called: the owner name it acquires under (one client's calls
             are logged in the order it made them)
  call       acquire | acquire_shared | acquire_permit/N (a semaphore of N
             permits) | heartbeat | release | revoke | write
  name       the lease name
  result     granted | denied | ok | false | LF001 | error | unknown
             (unknown: the connection was lost before the answer, so the call
             may or may not have taken effect, at any time after invoke_us)
  token      the token granted, carried (heartbeat, release, write) or
             returned (revoke); - if none
  invoke_us, complete_us
             the client's CLOCK_REALTIME in microseconds since the epoch just
             before it sent the call and just after it read the answer (the
             servers run on the same machine and clock)
  ttl_ms     the TTL asked for (acquire, or a heartbeat's one-off ttl); -
             if none or unknown (a heartbeat without ttl extends by its
             grant's)
  valid_until_us
             a lower bound of the grant's expiry on the server clock that the
             client knows otherwise (the expires_at the server returned, or a
             session's last keepalive + its TTL); - if none

With --lossy (a failover to an asynchronous standby, which may lose calls
the old primary acknowledged) only what survives such a loss is checked: the
token order (the token epoch leap) and that writes carry granted tokens.

Blank lines and lines starting with '#' are ignored. Exits 0 if every
property holds, 1 if one is violated (each violation is printed), 2 on a log
it cannot read.
"""

import argparse
import bisect
import collections
import os
import sys
import tempfile

INF = float("inf")
ORIGIN = [0]  # the earliest invoke_us of the logs: times are printed as ms after it


def ms(us):
    return "%.3f" % ((us - ORIGIN[0]) / 1000.0)
CALLS_GRANT = ("acquire", "acquire_shared", "acquire_permit")
RESULTS = ("granted", "denied", "ok", "false", "LF001", "error", "unknown")


class LogError(Exception):
    pass


class Call:
    __slots__ = ("client", "call", "mode", "permits", "name", "result", "token", "invoke", "complete", "ttl",
                 "valid_until", "where")

    def __str__(self):
        return "%s: %s %s %s %s token %s [%s, %s] ms" % (
            self.where, self.client, self.call, self.name, self.result,
            "-" if self.token is None else self.token, ms(self.invoke), ms(self.complete))


def parse_line(line, where):
    f = line.rstrip("\n").split("\t")
    if len(f) != 9:
        raise LogError("%s: %d fields, not 9: %r" % (where, len(f), line))
    c = Call()
    c.where = where
    c.client, call, c.name, c.result = f[0], f[1], f[2], f[3]
    c.mode, c.permits = None, None
    if call == "acquire":
        c.mode = "exclusive"
    elif call == "acquire_shared":
        c.mode = "shared"
    elif call.startswith("acquire_permit/"):
        c.mode, c.permits = "permit", int(call.split("/", 1)[1])
        call = "acquire_permit"
    elif call not in ("heartbeat", "release", "revoke", "write"):
        raise LogError("%s: unknown call %r" % (where, call))
    c.call = call
    if c.result not in RESULTS:
        raise LogError("%s: unknown result %r" % (where, c.result))
    try:
        c.token = None if f[4] == "-" else int(f[4])
        c.invoke, c.complete = int(f[5]), int(f[6])
        c.ttl = None if f[7] == "-" else int(f[7]) * 1000
        c.valid_until = None if f[8] == "-" else int(f[8])
    except ValueError as e:
        raise LogError("%s: %s" % (where, e))
    if c.complete < c.invoke:
        raise LogError("%s: completed before it was invoked" % where)
    if c.result == "granted" and (call not in CALLS_GRANT or c.token is None):
        raise LogError("%s: 'granted' needs an acquire call and a token" % where)
    return c


def read_logs(paths):
    calls = []
    for path in paths:
        with open(path, encoding="utf-8") as log:
            for number, line in enumerate(log, 1):
                if line.strip() and not line.startswith("#"):
                    calls.append(parse_line(line, "%s:%d" % (os.path.basename(path), number)))
    return calls


class Grant:
    """One acknowledged grant and what the log says about its life."""

    def __init__(self, call):
        self.call = call
        # Certainly live on the server over [start, live_until): it was granted
        # by the time the client saw the token, and its expiry is at least the
        # acquire's invoke time + TTL (the server reads its clock after that).
        self.start = call.complete
        self.live_until = max(call.invoke + (call.ttl or 0), call.complete, call.valid_until or 0)
        self.ended_by = None  # the first call that may have ended it early, if any
        self.ends_at = INF    # and the earliest moment it may have done so
        # The first call whose answer says it had ended: an acknowledged
        # release, a heartbeat answered false (nothing revives a grant).
        self.dead_by = None
        # The latest moment it can have been live by its TTL: the last call
        # that may have extended it, completed, + TTL (None: unknown).
        self.expires_by = call.complete + call.ttl if call.ttl is not None else None

    def may_end(self, call, at):
        if at < self.ends_at:
            self.ends_at, self.ended_by = at, call

    def certain_end(self):
        return min(self.live_until, self.ends_at)


def build_grants(calls, out):
    """The grants by (name, token) and by name, and how many tokens were
    granted twice (a violation of the token order, reported in out)."""
    grants = {}  # (name, token) -> Grant
    twice = 0
    for c in calls:
        if c.result == "granted":
            key = (c.name, c.token)
            if key in grants:
                twice += 1
                if twice <= 10:
                    out.append("token order of %s: token %d granted twice: %s and %s"
                               % (c.name, c.token, grants[key].call, c))
                continue
            grants[key] = Grant(c)
    by_name = collections.defaultdict(list)
    by_owner = collections.defaultdict(list)  # (name, client) -> grants
    for g in grants.values():
        by_name[g.call.name].append(g)
        by_owner[(g.call.name, g.call.client)].append(g)
    for c in calls:
        own = grants.get((c.name, c.token)) if c.token is not None else None
        if c.call == "heartbeat" and own:
            ttl = c.ttl if c.ttl is not None else own.call.ttl
            if c.result == "ok":
                # Live when the server ran it (after invoke), and extended by
                # the TTL from then; without a TTL, live until then at least.
                own.live_until = max(own.live_until, c.invoke + (ttl or 0), c.valid_until or 0)
            if c.result == "false" and (own.dead_by is None or c.complete < own.dead_by.complete):
                own.dead_by = c
            if c.result in ("ok", "unknown") and own.expires_by is not None:
                # An ambiguous heartbeat may run on the server at any time
                # after its invoke (a half-open connection): no bound.
                own.expires_by = INF if c.result == "unknown" or ttl is None else max(own.expires_by, c.complete + ttl)
        elif c.call == "release" and own and c.result != "error":
            own.may_end(c, c.invoke)
            if c.result in ("ok", "false") and (own.dead_by is None or c.complete < own.dead_by.complete):
                own.dead_by = c
        elif c.call == "revoke" and c.result != "error":
            # Ends whichever grant of the name is live when it runs.
            for g in by_name.get(c.name, ()):
                if c.complete > g.call.invoke:
                    g.may_end(c, c.invoke)
        elif c.call in CALLS_GRANT and c.result != "error":
            # The same owner's new acquire of the name replaces its grant.
            for g in by_owner.get((c.name, c.client), ()):
                if g.call is not c and c.invoke >= g.call.invoke:
                    g.may_end(c, c.invoke)
    return grants, by_name, twice


def check_overlaps(by_name, slack, out):
    """No more holders at once than the name allows, by certain lives."""
    bad = 0
    for name, grants in sorted(by_name.items()):
        events = []
        for g in grants:
            start, end = g.start, g.certain_end() - slack
            if end > start:
                events.append((start, 1, g))
                events.append((end, 0, g))  # ends sort before starts at the same instant
        events.sort(key=lambda e: (e[0], e[1]))
        live = set()
        for _, kind, g in events:
            if kind == 0:
                live.discard(g)
                continue
            others = [o for o in live]
            live.add(g)
            exclusive = [o for o in live if o.call.mode == "exclusive"]
            permits = [o for o in live if o.call.mode == "permit"]
            cap = min((o.call.permits for o in permits), default=None)
            if (exclusive and len(live) > 1) or (cap is not None and len(permits) > cap):
                bad += 1
                if bad <= 10:
                    out.append("overlapping grants of %s: %s is certainly live over [%s, %s] ms while %s"
                               % (name, g.call, ms(g.start), ms(g.certain_end()),
                                  "; ".join("%s (live until %s)" % (o.call, ms(o.certain_end()))
                                            for o in others)))
        bad += check_granted_beside(name, grants, slack, out, bad)
    return bad


def check_granted_beside(name, grants, slack, out, bad_before):
    """A grant made (between its invoke and its completion) while another,
    conflicting grant was certainly live: that covers grants whose own
    certain life is empty (a grant released at once, or one whose TTL the
    client does not know)."""
    bad = 0
    lives = sorted((g for g in grants if g.certain_end() - slack > g.start), key=lambda g: g.start)
    starts = [g.start for g in lives]
    # best[kind][i]: the two longest-lived grants among lives[:i + 1], of any mode
    # ("any") or exclusive ones only ("exclusive").
    best = {"any": [], "exclusive": []}
    for kind in best:
        top = []
        for g in lives:
            if kind == "any" or g.call.mode == "exclusive":
                top = sorted(top + [g], key=lambda o: -o.certain_end())[:2]
            best[kind].append(top)
    for b in grants:
        if b.call.mode == "permit":
            continue  # a semaphore's count of permits is check_overlaps' business
        i = bisect.bisect_right(starts, b.call.invoke)
        if not i:
            continue
        kind = "any" if b.call.mode == "exclusive" else "exclusive"
        for a in best[kind][i - 1]:
            if a is not b and b.call.complete < a.certain_end() - slack:
                bad += 1
                if bad_before + bad <= 10:
                    out.append("overlapping grants of %s: %s was granted while %s was certainly live over [%s, %s] ms"
                               % (name, b.call, a.call, ms(a.start), ms(a.certain_end())))
                break
    return bad


def check_token_order(calls, slack, out):
    """Per name, a grant (or revoke) that completed before another was invoked
    has the smaller token; tokens of grants are unique (build_grants)."""
    bad = 0
    by_name = collections.defaultdict(list)
    for c in calls:
        if c.token is not None and (c.result == "granted" or (c.call == "revoke" and c.result == "ok")):
            by_name[c.name].append(c)
    for name, cs in sorted(by_name.items()):
        done = sorted(cs, key=lambda c: c.complete)
        completes = [c.complete for c in done]
        best = []  # best[i]: the call with the largest token among done[:i + 1]
        for c in done:
            best.append(c if not best or c.token > best[-1].token else best[-1])
        for c in cs:
            # done[:i] completed before c was invoked: two readings of one
            # clock, so no slack (an equal reading leaves the order open).
            i = bisect.bisect_left(completes, c.invoke)
            if i and best[i - 1].token >= c.token:
                bad += 1
                if bad <= 10:
                    out.append("token order of %s: %s came after %s, which completed first" % (name, c, best[i - 1]))
    return bad


def check_writes(calls, grants, slack, out):
    """Every accepted write carried a token granted for its name that was
    still current when the write was invoked; no holder whose grant was
    certainly live was turned away (LF001, or a heartbeat returning false)."""
    stale, unknown, turned_away = 0, 0, 0
    advances = collections.defaultdict(list)  # name -> exclusive grants and revokes, by completion
    for c in calls:
        if (c.result == "granted" and c.mode == "exclusive") or (c.call == "revoke" and c.result == "ok"
                                                                 and c.token is not None):
            advances[c.name].append(c)
    index = {}
    for name, cs in advances.items():
        cs.sort(key=lambda c: c.complete)
        best = []
        for c in cs:
            best.append(c if not best or c.token > best[-1].token else best[-1])
        index[name] = ([c.complete for c in cs], best)
    for c in calls:
        g = grants.get((c.name, c.token))
        if c.call == "write" and c.result == "ok":
            if g is None:
                unknown += 1
                if unknown <= 10:
                    out.append("accepted write with a token never granted for its name: %s" % c)
                continue
            reason = None
            completes, best = index.get(c.name, ([], []))
            i = bisect.bisect_left(completes, c.invoke)
            if i and best[i - 1].token > c.token:
                reason = "%s had completed before it was invoked" % best[i - 1]
            elif g.dead_by is not None and g.dead_by.complete < c.invoke:
                reason = "its grant had ended by %s" % g.dead_by
            elif g.expires_by is not None and g.expires_by < c.invoke - slack:
                reason = "its grant (%s) had expired by %s ms on any clock reading" % (g.call, ms(g.expires_by))
            if reason:
                stale += 1
                if stale <= 10:
                    out.append("stale write accepted: %s, but %s" % (c, reason))
        elif g is not None and ((c.call == "write" and c.result == "LF001")
                                or (c.call == "heartbeat" and c.result == "false")):
            if g.start <= c.invoke and c.complete < g.certain_end() - slack:
                turned_away += 1
                if turned_away <= 10:
                    out.append("live holder turned away: %s, while %s is certainly live until %s ms"
                               % (c, g.call, ms(g.certain_end())))
    return stale, unknown, turned_away


def check(paths, slack_ms=1.0, lossy=False, out=None):
    """Returns (violations, lines to print)."""
    out = [] if out is None else out
    calls = read_logs(paths)
    ORIGIN[0] = min((c.invoke for c in calls), default=0)
    slack = slack_ms * 1000
    grants, by_name, twice = build_grants(calls, out)
    overlaps = 0 if lossy else check_overlaps(by_name, slack, out)
    order = twice + check_token_order(calls, slack, out)
    checked = []
    stale, unknown, turned_away = check_writes(calls, grants, slack, checked)
    if lossy:
        # A lost grant, heartbeat or release makes a later write look stale,
        # or a holder look turned away: only writes under no grant count.
        stale = turned_away = 0
        checked = [line for line in checked if line.startswith("accepted write with a token never granted")]
    out.extend(checked)
    writes = sum(1 for c in calls if c.call == "write" and c.result == "ok")
    ambiguous = sum(1 for c in calls if c.result == "unknown")
    clients = len({c.client for c in calls})
    out.insert(0, "history: %d calls by %d clients on %d names: %d grants, %d accepted writes, %d ambiguous calls"
               % (len(calls), clients, len(by_name), len(grants), writes, ambiguous))
    out.insert(1, "history: times are ms after the first invoke, %d us after the epoch" % ORIGIN[0])
    out.insert(2, "history: overlapping grants %d, token order %d, stale writes %d, writes under no grant %d, "
               "live holders turned away %d%s" % (overlaps, order, stale, unknown, turned_away,
                                                  " (--lossy: only the token order and writes under no grant checked)"
                                                  if lossy else ""))
    return overlaps + order + stale + unknown + turned_away, out


# The self-test: forged logs, each breaking one property (or, the last ones,
# ambiguous or legitimate histories that must pass). Times in ms from 0.
SELF_TESTS = [
    ("overlapping grants", True, [
        "a acquire n granted 1 0 2 1000", "b acquire n granted 2 500 502 1000"]),
    ("a grant made while another was certainly live, then released at once", True, [
        "a acquire n granted 1 0 2 1000", "b acquire n granted 2 100 102", "b release n ok 2 103 104"]),
    ("a token granted twice", True, [
        "a acquire n granted 1 0 2 100", "a release n ok 1 10 12", "b acquire n granted 1 20 22 100"]),
    ("a token going backwards", True, [
        "a acquire n granted 5 0 2 100", "a release n ok 5 10 12 -", "b acquire n granted 4 20 22 100"]),
    ("a stale-token write accepted after a newer grant", True, [
        "a acquire n granted 1 0 2 100", "b acquire n granted 2 300 302 100", "a write n ok 1 310 320 -"]),
    ("a write accepted right after its release", True, [
        "a acquire n granted 1 0 2 1000", "a release n ok 1 10 12", "a write n ok 1 12.1 13"]),
    ("a write accepted after a heartbeat of its token returned false", True, [
        "a acquire n granted 1 0 2 1000", "a heartbeat n false 1 10 12", "a write n ok 1 20 21"]),
    ("a write accepted after its grant had expired, with no newer grant", True, [
        "a acquire n granted 1 0 2 100", "a write n ok 1 200 210 -"]),
    ("a write under a token never granted", True, [
        "a acquire n granted 1 0 2 100", "a write n ok 7 10 20 -"]),
    ("a live holder turned away", True, [
        "a acquire n granted 1 0 2 1000", "a write n LF001 1 10 20 -"]),
    ("three permits of a semaphore of two", True, [
        "a acquire_permit/2 s granted 1 0 2 1000", "b acquire_permit/2 s granted 2 0 2 1000",
        "c acquire_permit/2 s granted 3 10 12 1000"]),
    ("an exclusive grant beside a shared one", True, [
        "a acquire_shared r granted 1 0 2 1000", "b acquire r granted 2 10 12 1000"]),
    # Must pass: the first release's outcome is unknown (the connection was
    # lost): it may have freed the lease at once, so b's grant is no overlap;
    # a's write after it is a zombie's, rejected.
    ("an ambiguous release, then a takeover", False, [
        "a acquire n granted 1 0 2 1000", "a release n unknown 1 100 150 -", "b acquire n granted 2 120 122 1000",
        "a write n LF001 1 130 140 -"]),
    # Must pass: a heartbeat whose outcome is unknown may have extended the
    # grant at any later time, so a late write under it is no proof of staleness.
    ("an ambiguous heartbeat, then a late write", False, [
        "a acquire n granted 1 0 2 100", "a heartbeat n unknown 1 50 60 -", "a write n ok 1 500 510 -"]),
    # Must pass: an acquire whose outcome is unknown, retried; overlapping
    # windows leave the order of the tokens open; a revoke ends a's grant.
    ("a retried acquire, concurrent windows, a revoke", False, [
        "a acquire n unknown - 0 50 1000", "a acquire n granted 3 60 70 1000",
        "b acquire m granted 9 60 200 1000", "c acquire m granted 8 100 150 40",
        "admin revoke n ok 10 300 310 -", "b acquire n granted 11 320 330 1000", "a write n LF001 3 340 350 -"]),
    # Must pass: the same owner acquires again (a new token replaces its grant).
    ("the same owner re-acquires", False, [
        "a acquire n granted 1 0 2 1000", "a acquire n granted 2 10 12 1000", "a write n LF001 1 20 30 -",
        "a write n ok 2 40 50 -"]),
]


def self_test():
    failures = 0
    with tempfile.TemporaryDirectory(prefix="history-self-test.") as tmp:
        for i, (title, must_fail, lines) in enumerate(SELF_TESTS):
            path = os.path.join(tmp, "forged%d.log" % i)
            with open(path, "w", encoding="utf-8") as log:
                for line in lines:
                    f = line.split()
                    f[5], f[6] = str(int(float(f[5]) * 1000)), str(int(float(f[6]) * 1000))
                    f += ["-"] * (9 - len(f))
                    log.write("\t".join(f) + "\n")
            violations, out = check([path])
            ok = (violations > 0) == must_fail
            failures += not ok
            print("%s %s: %s" % ("ok" if ok else "not ok", "flagged" if must_fail else "passes", title))
            if not ok or must_fail:
                print("\n".join("#   " + line for line in out[2 if must_fail else 0:]))
    print("history self-test: %d passed, %d failed" % (len(SELF_TESTS) - failures, failures))
    return 1 if failures else 0


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--slack-ms", type=float, default=1.0,
                        help="clock granularity: certain lives are shortened, and bounds widened, by this much")
    parser.add_argument("--lossy", action="store_true",
                        help="acknowledged calls may have been lost (asynchronous failover): check what survives that")
    parser.add_argument("--self-test", action="store_true", help="run the checker over forged logs")
    parser.add_argument("logs", nargs="*")
    args = parser.parse_args()
    if args.self_test:
        return self_test()
    if not args.logs:
        parser.error("no log given")
    try:
        violations, out = check(args.logs, args.slack_ms, args.lossy)
    except (LogError, OSError) as e:
        print("history: cannot read the logs: %s" % e)
        return 2
    print("\n".join(out))
    return 1 if violations else 0


if __name__ == "__main__":
    sys.exit(main())
