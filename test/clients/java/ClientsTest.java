// Tests of the Java helper (clients/java) against a real cluster; run by
// test/clients/run.sh, which sets the environment (CLIENTS_CONNINFO, a JDBC
// URL here; CLIENTS_ADMIN; CLIENTS_PREFIX; CLIENTS_SERVER_STOP/START: see
// python_test.py). Prints "ok - ..." / "not ok - ..." lines and "# end".
package clientstest;

import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.io.PrintWriter;
import java.math.BigInteger;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.DriverManager;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.List;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.TimeUnit;

import pglease.ConnectionFactory;
import pglease.FencedError;
import pglease.FencedException;
import pglease.Lease;
import pglease.LeaseLostException;
import pglease.NotAcquiredException;
import pglease.Session;
import pglease.SessionLease;

@SuppressWarnings("deprecation") // testZombie and testFence keep using the old names, which must go on working
public final class ClientsTest {
    static final String URL = System.getenv("CLIENTS_CONNINFO");
    static final String PREFIX = System.getenv("CLIENTS_PREFIX");
    static final long TWO_53 = 1L << 53;

    interface Test {
        void run() throws Exception;
    }

    static void report(boolean ok, String description, Object... diagnostic) {
        System.out.println((ok ? "ok - " : "not ok - ") + description);
        if (!ok && diagnostic.length > 0)
            for (String line : Arrays.toString(diagnostic).split("\n"))
                System.out.println("#   " + line);
    }

    static Connection connect() throws SQLException {
        return DriverManager.getConnection(URL);
    }

    static Lease hold(String name, Lease.Options options) throws Exception {
        return Lease.hold(ClientsTest::connect, name, options);
    }

    /** The first row of a query straight on the server, as strings. */
    static List<String> admin(String sql, Object... args) throws SQLException {
        try (Connection c = connect(); PreparedStatement s = c.prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++)
                s.setObject(i + 1, args[i]);
            try (ResultSet rs = s.executeQuery()) {
                List<String> row = new ArrayList<>();
                if (rs.next())
                    for (int i = 1; i <= rs.getMetaData().getColumnCount(); i++)
                        row.add(rs.getString(i));
                return row;
            }
        }
    }

    static List<String> leaseRow(String name) throws SQLException {
        return admin("SELECT owner, token::text, state, extract(epoch FROM expires_at)::float8 FROM lease.status WHERE name = ?", name);
    }

    static void insert(Connection c, String name, String note) throws SQLException {
        try (PreparedStatement s = c.prepareStatement("INSERT INTO client_work (lease_name, note) VALUES (?, ?)")) {
            s.setString(1, name);
            s.setString(2, note);
            s.executeUpdate();
        }
    }

    static void testAcquireReleaseBigint() throws Exception {
        String name = PREFIX + "acquire";
        long first;
        try (Lease lease = hold(name, new Lease.Options().owner("java-a").ttl(Duration.ofSeconds(5)))) {
            List<String> row = leaseRow(name);
            report(lease.token() > TWO_53 && Long.toString(lease.token()).equals(row.get(1)) && row.get(2).equals("held")
                    && row.get(0).equals("java-a"),
                    "acquire: token " + lease.token() + " (> 2^53) is the server's exactly, lease held by the owner", row);
            first = lease.token();
        }
        List<String> row = leaseRow(name);
        report(row.get(2).equals("free"), "close() releases the lease (try-with-resources)", row);

        try (Lease lease = hold(name, new Lease.Options().owner("java-a").ttl(Duration.ofSeconds(5)))) {
            row = leaseRow(name);
            report(lease.token() == first + 1 && new BigInteger(row.get(1)).longValueExact() == lease.token(),
                    "bigint tokens round-trip exactly, odd and even: " + first + ", " + lease.token(), row);
        }
    }

    static void testNotAcquired() throws Exception {
        String name = PREFIX + "busy";
        try (Lease first = hold(name, new Lease.Options().owner("java-first").ttl(Duration.ofSeconds(5)))) {
            try (Lease second = hold(name, new Lease.Options().owner("java-second"))) {
                report(false, "a held lease is not acquired (wait 0)");
            } catch (NotAcquiredException e) {
                report(true, "a held lease is not acquired: NotAcquiredException (wait 0; the NULL token is not 0)");
            }
            long started = System.nanoTime();
            try (Lease second = hold(name, new Lease.Options().owner("java-second").waitFor(Duration.ofMillis(400)))) {
                report(false, "NotAcquiredException after waitFor");
            } catch (NotAcquiredException e) {
                long waited = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - started);
                report(waited >= 400 && waited < 1500, "NotAcquiredException after waitFor 400 ms (took " + waited + " ms)");
            }
        }
    }

    /** A waiter is woken by the release: the server queues it (no polling every TTL/10, 1 s here). */
    static void testWaiterWoken() throws Exception {
        String name = PREFIX + "wait";
        Lease first = hold(name, new Lease.Options().owner("java-first").ttl(Duration.ofSeconds(10)));
        CompletableFuture<Long> releasing = new CompletableFuture<>();
        Thread releaser = new Thread(() -> {
            try {
                Thread.sleep(500);
                releasing.complete(System.nanoTime());
                first.close();
            } catch (Exception e) {
                releasing.completeExceptionally(e);
            }
        });
        releaser.start();
        try (Lease second = hold(name, new Lease.Options().owner("java-second").ttl(Duration.ofSeconds(10)).waitFor(Duration.ofSeconds(3)))) {
            long took = TimeUnit.NANOSECONDS.toMillis(System.nanoTime() - releasing.get());
            report(second.token() > first.token() && took < 300,
                    "a waiter gets the lease " + took + " ms after the holder starts releasing it (wait 3 s, TTL 10 s)");
        }
        releaser.join();
    }

    static void testErrors() throws Exception {
        try {
            hold("java-bad", new Lease.Options().ttl(Duration.ofMillis(50)));
            report(false, "a ttl under 100 ms is refused");
        } catch (IllegalArgumentException e) {
            report(e.getMessage().contains("100 ms"), "a ttl under 100 ms is refused", e);
        }
        try {
            hold("", new Lease.Options());
            report(false, "an empty lease name is refused");
        } catch (IllegalArgumentException e) {
            report(true, "an empty lease name is refused");
        }
        try {
            Lease.hold(() -> DriverManager.getConnection(URL.replaceFirst(":[0-9]+/", ":1/")), "java-unreachable", new Lease.Options());
            report(false, "an unreachable server: the driver's SQLException");
        } catch (SQLException e) {
            report("08001".equals(e.getSQLState()), "an unreachable server: the driver's SQLException (08001)", e);
        }
    }

    interface Call {
        void run() throws Exception;
    }

    static void expect(String what, Class<? extends Exception> type, String message, Call call) {
        try {
            call.run();
            report(false, "bad input, " + what + ": " + type.getSimpleName() + " \"" + message + "\"");
        } catch (Exception e) {
            boolean ok = type.isInstance(e) && (e.getMessage().equals(message) || message.endsWith(": ") && e.getMessage().startsWith(message));
            report(ok, "bad input, " + what + ": " + type.getSimpleName() + " \"" + message + "\" before any round trip", e);
        }
    }

    /**
     * The same bad input gets the same message from every helper (docs/clients.md, "Bad input"),
     * before any round trip: the server here is unreachable, so a round trip would throw the
     * driver's SQLException instead.
     */
    static void testBadInput() throws Exception {
        String down = "host=127.0.0.1 port=1 user=postgres dbname=postgres";
        expect("an empty name", IllegalArgumentException.class, "pglease: the lease name must not be empty",
                () -> Lease.hold(down, "", new Lease.Options()));
        expect("a zero ttl", IllegalArgumentException.class, "pglease: the ttl must be at least 100 ms, not PT0S",
                () -> Lease.hold(down, "java-bad", new Lease.Options().ttl(Duration.ZERO)));
        expect("a negative ttl", IllegalArgumentException.class, "pglease: the ttl must be at least 100 ms, not PT-1S",
                () -> Lease.hold(down, "java-bad", new Lease.Options().ttl(Duration.ofSeconds(-1))));
        expect("a negative wait", IllegalArgumentException.class, "pglease: wait must not be negative",
                () -> Lease.hold(down, "java-bad", new Lease.Options().wait(Duration.ofMillis(-1))));
        expect("no connection (a null factory)", NullPointerException.class, "pglease: no connection given",
                () -> Lease.hold((ConnectionFactory) null, "java-bad", new Lease.Options()));
        expect("no connection (a null string)", NullPointerException.class, "pglease: no connection given",
                () -> Lease.hold((String) null, "java-bad", new Lease.Options()));
        expect("a malformed key=value string", IllegalArgumentException.class,
                "pglease: malformed connection string: missing \"=\" after \"dbname\" in connection info string",
                () -> Lease.hold("host=127.0.0.1 port=1 dbname", "java-bad", new Lease.Options()));
        expect("an unknown keyword", IllegalArgumentException.class,
                "pglease: malformed connection string: invalid connection option \"colour\"",
                () -> Lease.hold("host=127.0.0.1 port=1 colour=blue", "java-bad", new Lease.Options()));
        expect("a malformed URI", IllegalArgumentException.class, "pglease: malformed connection string: ",
                () -> Lease.hold("postgresql://[::1", "java-bad", new Lease.Options()));
        try (Lease lease = hold(PREFIX + "bad-input", new Lease.Options().ttl(Duration.ofSeconds(5)))) {
            expect("transaction(null, work)", NullPointerException.class, "pglease: no connection given",
                    () -> lease.transaction(null, c -> null));
            expect("fence(null)", NullPointerException.class, "pglease: no connection given", () -> lease.fence(null));
        }
    }

    /** libpq connection strings, keyword = value pairs and a URI, for the helper and the application. */
    static void testConnectionStrings() throws Exception {
        String keywords = System.getenv("CLIENTS_KEYWORD_CONNINFO");
        String uri = URL.replaceFirst("^jdbc:postgresql://([^/]*)/([^?]*)\\?user=(.*)$", "postgresql://$3@$1/$2");
        for (String conninfo : new String[] {keywords, uri}) {
            String name = PREFIX + "conninfo";
            try (Lease lease = Lease.hold(conninfo, name, new Lease.Options().ttl(Duration.ofSeconds(5)));
                    Connection c = ConnectionFactory.of(conninfo).connect()) {
                lease.transaction(c, tx -> {
                    try (PreparedStatement s = tx.prepareStatement("INSERT INTO client_log (lease_name, note) VALUES (?, 'conninfo')")) {
                        s.setString(1, name);
                        return s.executeUpdate();
                    }
                });
                report(leaseRow(name).get(2).equals("held"),
                        "a libpq connection string (" + conninfo + ") works for the helper and, through ConnectionFactory.of, for JDBC");
            } catch (Exception e) {
                report(false, "a libpq connection string (" + conninfo + ") works for the helper and, through ConnectionFactory.of, for JDBC", e);
            }
        }
    }

    /** A session: one keepalive for its leases, its close releases them all, a session closed behind its back is a loss. */
    static void testSession() throws Exception {
        String aName = PREFIX + "session-a", bName = PREFIX + "session-b";
        try (Connection c = connect()) {
            try (Session session = Session.open(ClientsTest::connect, new Lease.Options().ttl(Duration.ofSeconds(2)))) {
                SessionLease a = session.acquire(aName, Duration.ZERO);
                SessionLease b = session.acquire(bName, Duration.ofMillis(500));
                Thread.sleep(5000);
                String aState = leaseRow(aName).get(2), bState = leaseRow(bName).get(2);
                report(!session.isLost() && aState.equals("held") && bState.equals("held") && b.token() > a.token() && a.token() > TWO_53,
                        "a session keeps its two leases for 5 s (TTL 2 s) with its keepalive alone", aState, bState);
                a.transaction(c, tx -> {
                    insert(tx, aName, "session");
                    return null;
                });
                admin("SELECT lease.lease_revoke(?)::text", bName);
                try {
                    b.transaction(c, tx -> null);
                    report(false, "a session lease fences: a revoked one's transaction throws FencedError");
                } catch (FencedError e) {
                    report(e.getDetail() != null, "a session lease fences: a revoked one's transaction throws FencedError", e);
                }
            }
            report(leaseRow(aName).get(2).equals("free"), "close() closes the session: its leases are released");
        }
        CompletableFuture<Long> lostAt = new CompletableFuture<>();
        long closed = 0;
        Session session = Session.open(ClientsTest::connect, new Lease.Options().ttl(Duration.ofMillis(1500)));
        try {
            session.whenLost().thenRun(() -> lostAt.complete(System.nanoTime()));
            admin("SELECT lease.session_close(?)::text", session.id());
            closed = System.nanoTime();
            Long at = lostAt.completeOnTimeout(null, 3, TimeUnit.SECONDS).get();
            long took = at == null ? -1 : TimeUnit.NANOSECONDS.toMillis(at - closed);
            try {
                session.acquire(bName, Duration.ZERO);
                report(false, "a lost session refuses acquire with LeaseLostException");
            } catch (LeaseLostException e) {
                report(took >= 0 && took <= 750, "a session closed behind its back is lost at the next keepalive (" + took + " ms); acquire then throws LeaseLostException");
            }
        } finally {
            try {
                session.close();
                report(false, "close() after the session's loss throws LeaseLostException");
            } catch (LeaseLostException e) {
                report(true, "close() after the session's loss throws LeaseLostException");
            }
        }
    }

    static void testPool() throws Exception {
        String pool = PREFIX + "pool";
        admin("SELECT count(lease.pool_put(?, ? || ':' || i))::text FROM generate_series(1, 4) AS i", pool, pool);
        try (Session first = Session.open(ClientsTest::connect, new Lease.Options().ttl(Duration.ofSeconds(5)));
                Session second = Session.open(ClientsTest::connect, new Lease.Options().ttl(Duration.ofSeconds(5)))) {
            List<SessionLease> mine = first.claim(pool);
            report(mine.size() == 4 && mine.get(0).state().equals("{}"), "a lone claimer claims the whole pool", mine);
            List<SessionLease> theirs = second.claim(pool);
            List<String> surplus = first.surplus(pool);
            report(theirs.isEmpty() && surplus.size() == 2, "a second claimer: nothing free yet; the first has two beyond its share", theirs, surplus);
            boolean releasedAll = true;
            SessionLease old = null;
            for (SessionLease m : mine)
                if (surplus.contains(m.name())) {
                    releasedAll &= m.release();
                    old = m;
                }
            theirs = second.claim(pool);
            report(releasedAll && theirs.size() == 2, "what the first hands back, the second claims", theirs);
            boolean stale = old.checkpoint("{\"seq\": 99}");
            boolean fresh = false;
            for (SessionLease t : theirs)
                if (t.name().equals(old.name()))
                    fresh = t.checkpoint("{\"seq\": 1}");
            String state = admin("SELECT state::text FROM lease.pool_resources WHERE name = ?", old.name()).get(0);
            report(!stale && fresh && state.equals("{\"seq\": 1}"),
                    "checkpoint under a stale token is false and changes nothing; under the current one it stores the state", stale, fresh, state);
        }
    }

    static void testHeartbeat() throws Exception {
        String name = PREFIX + "heartbeat";
        try (Lease lease = hold(name, new Lease.Options().ttl(Duration.ofSeconds(2)))) {
            Thread.sleep(7000);
            List<String> row = leaseRow(name);
            String recent = admin("SELECT clock_timestamp() - renewed_at < interval '1 s' FROM lease.leases WHERE name = ?", name).get(0);
            report(!lease.isLost() && row.get(2).equals("held") && row.get(1).equals(Long.toString(lease.token())) && recent.equals("t"),
                    "heartbeats keep a 2 s lease for 7 s under the same token", row, recent);
        }
    }

    static void testFence() throws Exception {
        String name = PREFIX + "fence";
        try (Lease lease = hold(name, new Lease.Options().ttl(Duration.ofSeconds(5))); Connection c = connect()) {
            lease.inTransaction(c, tx -> {
                insert(tx, name, "fenced");
                try (PreparedStatement s = tx.prepareStatement("UPDATE client_work SET note = 'updated' WHERE lease_name = ?")) {
                    s.setString(1, name);
                    return s.executeUpdate();
                }
            });
            List<String> row = admin("SELECT note, fence_token::text FROM client_work WHERE lease_name = ?", name);
            report(row.equals(List.of("updated", Long.toString(lease.token())))
                    && c.getAutoCommit(),
                    "inTransaction: INSERT and UPDATE pass the fence trigger; the row carries the token; autocommit restored", row);
            lease.inTransaction(c, tx -> {
                try (PreparedStatement s = tx.prepareStatement("DELETE FROM client_work WHERE lease_name = ?")) {
                    s.setString(1, name);
                    return s.executeUpdate();
                }
            });
            String count = admin("SELECT count(*) FROM client_work WHERE lease_name = ?", name).get(0);
            report(count.equals("0"), "inTransaction: DELETE passes the fence trigger", count);

            try {
                lease.fence(c);
                report(false, "fence() in autocommit mode is refused");
            } catch (IllegalStateException e) {
                report(true, "fence() in autocommit mode is refused (IllegalStateException)");
            }
            c.setAutoCommit(false);
            lease.fence(c);
            insert(c, name, "own transaction");
            c.rollback();
            c.setAutoCommit(true);
            report(true, "fence(connection) in a transaction the application began");

            try (PreparedStatement s = c.prepareStatement("SELECT lease.fenced_write(?, ?)")) {
                s.setString(1, name);
                s.setLong(2, lease.token() - 1);
                s.executeQuery();
                report(false, "FencedException.isFenced recognises LF001 from any JDBC call");
            } catch (SQLException e) {
                report(FencedException.isFenced(e) && !(e instanceof FencedException),
                        "FencedException.isFenced recognises LF001 from any JDBC call", e);
            }
        }
    }

    static void testRevoked() throws Exception {
        String name = PREFIX + "revoked";
        CompletableFuture<Long> lostAt = new CompletableFuture<>();
        try (Connection c = connect()) {
            try (Lease lease = hold(name, new Lease.Options().ttl(Duration.ofMillis(1500)))) {
                lease.whenLost().thenRun(() -> lostAt.complete(System.nanoTime()));
                admin("SELECT lease.lease_revoke(?)::text", name);
                long revoked = System.nanoTime();
                Long at = lostAt.completeOnTimeout(null, 3, TimeUnit.SECONDS).get();
                long took = at == null ? -1 : TimeUnit.NANOSECONDS.toMillis(at - revoked);
                report(took >= 0 && took <= 750 && lease.isLost(),
                        "a revoked lease is lost at the next heartbeat: whenLost() completes after " + took + " ms");
                try {
                    lease.transaction(c, tx -> {
                        try (PreparedStatement s = tx.prepareStatement("INSERT INTO client_log (lease_name, note) VALUES (?, 'after revoke')")) {
                            s.setString(1, name);
                            s.executeUpdate();
                        }
                        return null;
                    });
                    report(false, "a fenced transaction under the revoked token throws FencedError");
                } catch (FencedError e) {
                    String written = admin("SELECT count(*) FROM client_log WHERE lease_name = ?", name).get(0);
                    report("LF001".equals(e.getSQLState()) && e.getCause() instanceof SQLException && written.equals("0")
                                    && e instanceof FencedException,
                            "a fenced transaction under the revoked token throws FencedError (SQLSTATE LF001; a FencedException"
                                    + " too, its old name) from the fence itself: nothing written to a table without a fence trigger", e, written);
                    report(e.getDetail() != null && !e.getDetail().isEmpty() && e.getMessage().contains(e.getDetail()),
                            "the FencedError keeps the server's DETAIL (getDetail(), and in getMessage())", e, e.getDetail());
                }
            }
            report(false, "close() after the loss throws LeaseLostException");
        } catch (LeaseLostException e) {
            report(true, "close() after the loss throws LeaseLostException (" + e.getMessage() + ")");
        }
    }

    /** Holds the lease, waits for a line on stdin (the parent stops and continues this process in between), then tries a fenced write. */
    static void zombieChild(String name) throws Exception {
        try (Connection c = connect();
                Lease lease = hold(name, new Lease.Options().owner("java-zombie").ttl(Duration.ofSeconds(1)))) {
            System.out.println(lease.token());
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
            try {
                lease.inTransaction(c, tx -> {
                    insert(tx, name, "zombie");
                    return null;
                });
                System.out.println("written");
            } catch (FencedException e) {
                System.out.println("fenced " + e.getSQLState());
            }
            lease.whenLost().toCompletableFuture().completeOnTimeout(null, 2, TimeUnit.SECONDS).get();
        } catch (LeaseLostException e) {
            System.out.println("lost");
        }
    }

    static void testZombie() throws Exception {
        String name = PREFIX + "zombie";
        String java = ProcessHandle.current().info().command().orElse("java");
        Process child = new ProcessBuilder(java, "-cp", System.getProperty("java.class.path"), ClientsTest.class.getName(), "--zombie", name)
                .redirectError(ProcessBuilder.Redirect.INHERIT).start();
        try {
            BufferedReader out = new BufferedReader(new InputStreamReader(child.getInputStream(), StandardCharsets.UTF_8));
            PrintWriter in = new PrintWriter(child.getOutputStream(), true, StandardCharsets.UTF_8);
            long zombieToken = Long.parseLong(out.readLine().trim());
            signal("STOP", child);
            Thread.sleep(1300);
            try (Lease successor = hold(name, new Lease.Options().owner("java-successor").ttl(Duration.ofSeconds(5)).waitFor(Duration.ofSeconds(3)))) {
                signal("CONT", child);
                in.println("go");
                String outcome = out.readLine();
                String ending = out.readLine();
                String written = admin("SELECT count(*) FROM client_work WHERE lease_name = ?", name).get(0);
                report("fenced LF001".equals(outcome) && written.equals("0") && successor.token() > zombieToken,
                        "a zombie stopped past its TTL: its fenced write after the takeover throws FencedException, nothing written", outcome, written);
                report("lost".equals(ending), "the zombie's helper reports the loss once it runs again", ending);
            }
        } finally {
            child.destroyForcibly().waitFor();
        }
    }

    static void signal(String signal, Process process) throws Exception {
        new ProcessBuilder("kill", "-" + signal, Long.toString(process.pid())).inheritIO().start().waitFor();
    }

    static void shell(String command) throws Exception {
        int status = new ProcessBuilder("sh", "-c", command).inheritIO().start().waitFor();
        if (status != 0)
            throw new IllegalStateException(command + " exited " + status);
    }

    static void testOutage() throws Exception {
        String name = PREFIX + "outage";
        CompletableFuture<Long> lostAt = new CompletableFuture<>();
        long stopped = 0;
        LeaseLostException closeError = null;
        try (Lease lease = hold(name, new Lease.Options().ttl(Duration.ofSeconds(4)))) {
            lease.whenLost().thenRun(() -> lostAt.complete(System.currentTimeMillis()));
            Thread.sleep(1500); // past the first heartbeat
            shell(System.getenv("CLIENTS_SERVER_STOP"));
            stopped = System.currentTimeMillis();
            lostAt.completeOnTimeout(null, 5, TimeUnit.SECONDS).get();
        } catch (LeaseLostException e) {
            closeError = e;
        } finally {
            shell(System.getenv("CLIENTS_SERVER_START"));
        }
        Long at = lostAt.getNow(null);
        double expires = Double.parseDouble(leaseRow(name).get(3)) * 1000;
        long margin = at == null ? 0 : Math.round(expires - at);
        report(at != null && margin >= 600 && at - stopped < 4000 && closeError != null,
                "the database stops: whenLost() completes " + margin + " ms before the lease expires on the server (grace 800 + TTL/10 400 expected, at least 600 required; TTL 4 s), "
                        + (at == null ? "-" : Long.toString(at - stopped)) + " ms after the outage began",
                closeError);
    }

    public static void main(String[] args) throws Exception {
        if (args.length == 2 && args[0].equals("--zombie")) {
            zombieChild(args[1]);
            return;
        }
        Test[] tests = {ClientsTest::testAcquireReleaseBigint, ClientsTest::testNotAcquired, ClientsTest::testWaiterWoken, ClientsTest::testErrors,
                ClientsTest::testBadInput, ClientsTest::testConnectionStrings, ClientsTest::testSession, ClientsTest::testPool,
                ClientsTest::testHeartbeat, ClientsTest::testFence, ClientsTest::testRevoked,
                Primitives::testSemaphore, Primitives::testSemaphoreRevoked, Primitives::testShared, Primitives::testAcquireAll,
                Primitives::testValues, Primitives::testSessionPrimitives, Primitives::testPrimitivesBadInput,
                WatchTest::testWatchSince, WatchTest::testWatchBadInput, WatchTest::testWatchServerError, ClientsTest::testZombie, ClientsTest::testOutage};
        String[] names = {"acquire", "not acquired", "waiter woken", "errors", "bad input", "connection strings", "session", "pool",
            "heartbeat", "fence", "revoked", "semaphore", "semaphore revoked", "shared", "acquire all", "values",
            "session primitives", "primitives bad input", "watch since", "watch bad input", "watch server error", "zombie", "outage"};
        for (int i = 0; i < tests.length; i++) {
            try {
                tests[i].run();
            } catch (Exception e) {
                report(false, names[i] + " ran", e);
            }
        }
        System.out.println("# end");
    }
}
