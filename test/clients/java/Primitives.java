// Tests of the Java helper's semaphores, shared leases, all-or-none grants and
// leader values (lease 1.3); run from ClientsTest.main.
package clientstest;

import static clientstest.ClientsTest.admin;
import static clientstest.ClientsTest.connect;
import static clientstest.ClientsTest.hold;
import static clientstest.ClientsTest.report;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.time.Duration;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import pglease.FencedError;
import pglease.Lease;
import pglease.LeaseLostException;
import pglease.NotAcquiredException;
import pglease.Session;
import pglease.SessionLease;

final class Primitives {
    static final String PREFIX = ClientsTest.PREFIX;

    static int leaderCount(String name) throws SQLException {
        return Integer.parseInt(admin("SELECT count(*) FROM lease.leader(?)", name).get(0));
    }

    static boolean waitForWaiter(String name, String mode) throws Exception {
        long deadline = System.nanoTime() + TimeUnit.SECONDS.toNanos(5);
        while (System.nanoTime() < deadline) {
            if (!admin("SELECT count(*) FROM lease.waiters WHERE name = ? AND mode = ?", name, mode).get(0).equals("0"))
                return true;
            Thread.sleep(20);
        }
        return false;
    }

    /** Holds (and releases at once) on a thread of its own: the token, or the exception. */
    static CompletableFuture<Object> holdInBackground(String name, Lease.Options options) {
        return CompletableFuture.supplyAsync(() -> {
            try (Lease lease = hold(name, options)) {
                return lease.token();
            } catch (Exception e) {
                return e;
            }
        });
    }

    static void write(Lease lease, Connection c, String table, String name, String note) throws SQLException {
        lease.transaction(c, tx -> {
            try (PreparedStatement s = tx.prepareStatement("INSERT INTO " + table + " (lease_name, note) VALUES (?, ?)")) {
                s.setString(1, name);
                s.setString(2, note);
                return s.executeUpdate();
            }
        });
    }

    static void testSemaphore() throws Exception {
        String name = PREFIX + "semaphore";
        Lease.Options options = new Lease.Options().ttl(Duration.ofSeconds(5)).permits(2);
        try (Lease a = hold(name, options)) {
            Lease b = hold(name, options);
            int holders = leaderCount(name);
            Object third = holdInBackground(name, new Lease.Options().ttl(Duration.ofSeconds(5)).permits(2).wait(Duration.ofMillis(300))).get(10, TimeUnit.SECONDS);
            report(a.token() != b.token() && holders == 2 && third instanceof NotAcquiredException,
                    "semaphore: two holders of 2 permits, each with its own token; a third is not acquired after waiting 0.3 s",
                    a.token(), b.token(), holders, third);
            CompletableFuture<Object> waiting = holdInBackground(name, new Lease.Options().ttl(Duration.ofSeconds(5)).permits(2).wait(Duration.ofSeconds(10)));
            boolean queued = waitForWaiter(name, "semaphore");
            boolean early = waiting.isDone();
            b.close();
            Object got = waiting.get(10, TimeUnit.SECONDS);
            report(queued && !early && got instanceof Long && (Long) got > b.token(),
                    "semaphore: a third holder waits in the server's queue and gets the permit the second gives back", queued, early, got);
        }
        report(leaderCount(name) == 0, "semaphore: every permit released");
    }

    static void testSemaphoreRevoked() throws Exception {
        String name = PREFIX + "semaphore-revoked";
        try (Lease permit = hold(name, new Lease.Options().ttl(Duration.ofSeconds(2)).permits(3)); Connection c = connect()) {
            write(permit, c, "client_log", name, "under the permit");
            admin("SELECT lease.lease_revoke(?)", name);
            LeaseLostException lost = null;
            try {
                lost = permit.whenLost().toCompletableFuture().get(3, TimeUnit.SECONDS);
            } catch (java.util.concurrent.TimeoutException e) {
                // reported below
            }
            report(lost != null && permit.isLost(), "semaphore: a revoked permit is signalled as a loss (whenLost completes)");
            String outcome = "written";
            try {
                write(permit, c, "client_log", name, "after the revoke");
            } catch (FencedError e) {
                outcome = e.getDetail() != null ? "FencedError" : "FencedError without DETAIL";
            }
            String written = admin("SELECT count(*) FROM client_log WHERE lease_name = ?", name).get(0);
            report(outcome.equals("FencedError") && written.equals("1"),
                    "semaphore: the revoked permit's next fenced transaction throws FencedError (with DETAIL), nothing written", outcome, written);
        } catch (LeaseLostException e) {
            // close() after the revoke
        }
    }

    static void testShared() throws Exception {
        String name = PREFIX + "shared";
        Lease.Options options = new Lease.Options().ttl(Duration.ofSeconds(5)).shared(true);
        CompletableFuture<Object> exclusive;
        try (Lease r1 = hold(name, options); Lease r2 = hold(name, options)) {
            int together = leaderCount(name);
            exclusive = holdInBackground(name, new Lease.Options().ttl(Duration.ofSeconds(5)).wait(Duration.ofSeconds(10)));
            boolean queued = waitForWaiter(name, "exclusive");
            Thread.sleep(200);
            boolean early = exclusive.isDone();
            int still = leaderCount(name);
            report(together == 2 && r1.token() != r2.token() && queued && !early && still == 2,
                    "shared: two shared holders together, each with its own token, while an exclusive request waits", together, still, queued, early);
        }
        Object got = exclusive.get(10, TimeUnit.SECONDS);
        report(got instanceof Long, "shared: the exclusive request is granted once both shared holders have released", got);
    }

    static void testAcquireAll() throws Exception {
        String a = PREFIX + "acct:b", b = PREFIX + "acct:a", c = PREFIX + "acct:c";
        try (Lease both = Lease.holdAll(ClientsTest::connect, List.of(a, b), new Lease.Options().ttl(Duration.ofSeconds(2)));
                Connection conn = connect()) {
            String server = admin("SELECT array_to_string(array_agg(token ORDER BY array_position(?::text[], name)), ',') FROM lease.leases"
                    + " WHERE name = ANY(?::text[]) AND owner IS NOT NULL", "{" + a + "," + b + "}", "{" + a + "," + b + "}").get(0);
            report(both.names().equals(List.of(a, b)) && List.copyOf(both.tokens().keySet()).equals(List.of(a, b))
                    && server.equals(both.tokenOf(a) + "," + both.tokenOf(b)) && both.tokenOf(a) != both.tokenOf(b),
                    "acquire all: one token per name, aligned with the names given, each the server's", both.tokens(), server);
            SqlRows rows = (names) -> both.transaction(conn, tx -> {
                for (String n : names) {
                    try (PreparedStatement s = tx.prepareStatement("INSERT INTO client_work (lease_name, note, fence_token) VALUES (?, 'both', ?)")) {
                        s.setString(1, n);
                        s.setLong(2, both.tokenOf(n));
                        s.executeUpdate();
                    }
                }
                return null;
            });
            rows.write(a, b);
            Object other;
            try (Lease l = Lease.holdAll(ClientsTest::connect, List.of(c, b), new Lease.Options().ttl(Duration.ofSeconds(5)).wait(Duration.ofMillis(200)))) {
                other = "acquired";
            } catch (NotAcquiredException e) {
                other = e;
            }
            String cState = admin("SELECT coalesce((SELECT state FROM lease.status WHERE name = ?), 'never granted')", c).get(0);
            report(other instanceof NotAcquiredException && !cState.equals("held"),
                    "acquire all: an overlapping set is not acquired, and holds nothing (all or none)", other, cState);
            admin("SELECT lease.lease_revoke(?)", b);
            String outcome = "written";
            try {
                rows.write(a);
            } catch (FencedError e) {
                outcome = "FencedError";
            }
            String written = admin("SELECT count(*) FROM client_work WHERE lease_name IN (?, ?)", a, b).get(0);
            report(outcome.equals("FencedError") && written.equals("2"),
                    "acquire all: fenced rows under each name's own token; one name revoked, the next fenced transaction throws FencedError", outcome, written);
        } catch (LeaseLostException e) {
            // close() after the revoke
        }
    }

    interface SqlRows {
        void write(String... names) throws SQLException;
    }

    static void testValues() throws Exception {
        String name = PREFIX + "leader";
        try (Lease lease = hold(name, new Lease.Options().owner("java-leader").ttl(Duration.ofSeconds(2))); Connection c = connect()) {
            boolean stored = lease.setValue("{\"addr\": \"10.0.0.5:5432\"}");
            List<Lease.Holder> holders = Lease.leader(c, name);
            report(stored && holders.size() == 1 && holders.get(0).owner().equals("java-leader") && holders.get(0).token() == lease.token()
                    && holders.get(0).value().equals("{\"addr\": \"10.0.0.5:5432\"}") && holders.get(0).expiresAt() != null,
                    "setValue, then leader(name): owner, token, the value published, expiresAt", stored, holders);
            admin("SELECT lease.lease_revoke(?)", name);
            try { // setValue still answers after the loss: false
                lease.whenLost().toCompletableFuture().get(3, TimeUnit.SECONDS);
            } catch (java.util.concurrent.TimeoutException e) {
                // reported below
            }
            boolean stale = lease.setValue("\"stale\"");
            boolean staleConn = lease.setValue(c, "\"stale\"");
            List<Lease.Holder> after = Lease.leader(c, name);
            report(!stale && !staleConn && after.isEmpty(),
                    "setValue with a stale token returns false (on the helper's connection and on yours), and publishes nothing", stale, staleConn, after);
        } catch (LeaseLostException e) {
            // close() after the revoke
        }
    }

    static void testSessionPrimitives() throws Exception {
        List<String> names = List.of(PREFIX + "s-acct:2", PREFIX + "s-acct:1");
        String sem = PREFIX + "s-semaphore", shared = PREFIX + "s-shared";
        try (Session s1 = Session.open(ClientsTest::connect, new Lease.Options().ttl(Duration.ofSeconds(5)));
                Session s2 = Session.open(ClientsTest::connect, new Lease.Options().ttl(Duration.ofSeconds(5)));
                Connection c = connect()) {
            SessionLease held = s1.acquireAll(names, Duration.ZERO);
            String server = admin("SELECT array_to_string(array_agg(token ORDER BY array_position(?::text[], name)), ',') FROM lease.leases"
                    + " WHERE name = ANY(?::text[]) AND session = ?", "{" + names.get(0) + "," + names.get(1) + "}",
                    "{" + names.get(0) + "," + names.get(1) + "}", s1.id()).get(0);
            report(server.equals(held.tokenOf(names.get(0)) + "," + held.tokenOf(names.get(1))),
                    "session: acquireAll gives a token per name, aligned with the names", held.tokens(), server);
            SessionLease permit = s1.acquire(sem, new Lease.Options().permits(1));
            Object second;
            try {
                second = s2.acquire(sem, new Lease.Options().permits(1).wait(Duration.ofMillis(200)));
            } catch (NotAcquiredException e) {
                second = e;
            }
            SessionLease r1 = s1.acquire(shared, new Lease.Options().shared(true));
            SessionLease r2 = s2.acquire(shared, new Lease.Options().shared(true));
            boolean published = r1.setValue("\"reader-1\"");
            List<String> values = new java.util.ArrayList<>();
            for (Lease.Holder h : Lease.leader(c, shared))
                values.add(String.valueOf(h.value()));
            java.util.Collections.sort(values);
            report(permit.token() > 0 && second instanceof NotAcquiredException && r1.token() != r2.token() && published
                    && values.equals(List.of("\"reader-1\"", "null")),
                    "session: a semaphore permit (a second session is not acquired) and two shared grants, one with a value", second, values);
        }
        report(leaderCount(sem) == 0 && leaderCount(shared) == 0 && leaderCount(names.get(0)) == 0,
                "session: closing the sessions ends their permits, shared and all-or-none grants");
    }

    static void testPrimitivesBadInput() throws Exception {
        String unreachable = "host=127.0.0.1 port=1 dbname=postgres connect_timeout=1";
        Object[][] checks = {
            {(ClientsTest.Test) () -> Lease.hold(unreachable, "x", new Lease.Options().permits(2).shared(true)), "pglease: permits and shared exclude each other"},
            {(ClientsTest.Test) () -> Lease.hold(unreachable, "x", new Lease.Options().permits(0)), "pglease: permits must be between 1 and 10000"},
            {(ClientsTest.Test) () -> Lease.holdAll(unreachable, List.of(), null), "pglease: no lease names given"},
            {(ClientsTest.Test) () -> Lease.holdAll(unreachable, List.of("a", ""), null), "pglease: the lease name must not be empty"},
        };
        for (Object[] check : checks) {
            String got = "no error";
            try {
                ((ClientsTest.Test) check[0]).run();
            } catch (IllegalArgumentException e) {
                got = e.getMessage();
            } catch (Exception e) {
                got = e.toString();
            }
            report(got.equals(check[1]), "bad input refused before any round trip: " + check[1], got);
        }
    }
}
