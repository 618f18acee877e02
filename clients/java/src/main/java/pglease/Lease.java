package pglease;

import java.lang.System.Logger.Level;
import java.net.InetAddress;
import java.security.SecureRandom;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.Objects;
import java.util.concurrent.CompletableFuture;
import java.util.concurrent.CompletionStage;
import java.util.concurrent.Executor;
import java.util.concurrent.ScheduledExecutorService;
import java.util.concurrent.ScheduledFuture;
import java.util.concurrent.ScheduledThreadPoolExecutor;
import java.util.concurrent.TimeUnit;

import org.postgresql.PGConnection;

/**
 * A held lease of the PostgreSQL extension {@code lease}, for try-with-resources:
 *
 * <pre>{@code
 * try (Lease lease = Lease.hold(dataSource::getConnection, "billing", new Lease.Options())) {
 *     lease.transaction(connection, c -> ...);   // fenced: LF001 throws FencedError
 * }
 * }</pre>
 *
 * <p>The helper acquires the lease on a connection of its own, heartbeats it every TTL/3 from
 * a daemon thread, and signals the loss ({@link #isLost}, {@link #whenLost}) before the server
 * could let the lease expire. The timing model is that of {@code pg_lease run}; see
 * docs/clients.md in the lease repository. Methods are safe to call from any thread.
 */
public final class Lease implements AutoCloseable {
    /** The shortest TTL {@link #hold} accepts. */
    public static final Duration MIN_TTL = Duration.ofMillis(100);

    // The helpers' messages for bad input, the same in every helper of clients/
    // (docs/clients.md, "Bad input"); each is thrown before any round trip.
    static final String NO_NAME = "pglease: the lease name must not be empty";
    static final String SHORT_TTL = "pglease: the ttl must be at least 100 ms";
    static final String NEGATIVE_WAIT = "pglease: wait must not be negative";
    static final String BAD_GRACE = "pglease: grace must be between 0 and ttl/2";
    static final String NO_CONNECTION = "pglease: no connection given";

    private static final long MAX_RELEASE_WAIT_NANOS = TimeUnit.SECONDS.toNanos(5);
    private static final System.Logger LOG = System.getLogger("pglease");

    // The ttl is bound as text and cast in SQL: a varchar parameter (setString)
    // would not match lease_acquire(text, text, interval).
    private static final String ACQUIRE = "SELECT lease.lease_acquire(?, ?, ?::pg_catalog.interval, ?::pg_catalog.interval)";
    private static final String HEARTBEAT = "SELECT lease.lease_heartbeat(?, ?)";
    private static final String RELEASE = "SELECT lease.lease_release(?, ?)";
    // Checks the lease now (LF001 at once for a stale token; no new grant can
    // commit until the transaction ends) and gives fence triggers the token
    // for the rest of the transaction: INSERT, UPDATE and DELETE alike.
    private static final String SESSION_OPEN = "SELECT lease.session_open(?, ?::pg_catalog.interval, false)";
    private static final String SESSION_KEEPALIVE = "SELECT lease.session_keepalive(?)";
    private static final String SESSION_CLOSE = "SELECT lease.session_close(?)";
    private static final String FENCE = "SELECT lease.fenced_write(?, ?), lease.set_fence_token(?)";

    // Signals a loss at its deadline even while the heartbeat thread waits for the network.
    private static final ScheduledExecutorService WATCHDOG = watchdog();

    /** Options of {@link #hold}; the defaults are those of {@code pg_lease run}. */
    public static final class Options {
        private String owner;
        private Duration ttl = Duration.ofSeconds(20);
        private Duration wait = Duration.ZERO;
        private Duration grace;

        /** Default {@code host:pid:random}; must be unique among running holders. */
        public Options owner(String owner) {
            this.owner = owner;
            return this;
        }

        /** Default 20 s, at least 100 ms. */
        public Options ttl(Duration ttl) {
            this.ttl = Objects.requireNonNull(ttl);
            return this;
        }

        /** How long to wait in the server's queue while another owner holds the lease; default 0: one try. */
        public Options wait(Duration wait) {
            this.wait = Objects.requireNonNull(wait, "wait");
            return this;
        }

        /** @deprecated the same as {@link #wait(Duration)}, the name every helper uses */
        @Deprecated
        public Options waitFor(Duration waitFor) {
            return wait(waitFor);
        }

        /** Time your code has to stop after the loss signal; default TTL/5, at most TTL/2. */
        public Options grace(Duration grace) {
            this.grace = Objects.requireNonNull(grace);
            return this;
        }
    }

    private final ConnectionFactory factory;
    private final String name;
    private final String owner;
    private final long ttl; // nanoseconds, like every period below
    private final long interval;
    private final long trust;
    private final long retry;
    private final Object lock = new Object();
    private final CompletableFuture<LeaseLostException> lost = new CompletableFuture<>();
    private final Thread heartbeats;
    // A Session's: token is the session id, kept alive by session_keepalive and ended by session_close.
    private final boolean session;

    private long token;
    private Connection connection; // the helper's own; used by one thread at a time
    // When the last acquire or heartbeat that succeeded was sent (System.nanoTime):
    // the server read its clock after that, so the lease expires no sooner than
    // TTL later (docs/cli.md, "How run keeps the command inside the lease").
    private volatile long lastSuccess;
    private boolean stopped; // guarded by lock
    private ScheduledFuture<?> watchdogTask; // guarded by lock
    private boolean closed;

    private Lease(ConnectionFactory factory, String name, Options options) {
        this(factory, name, options, false);
    }

    private Lease(ConnectionFactory factory, String name, Options options, boolean session) {
        this.session = session;
        if (factory == null)
            throw new NullPointerException(NO_CONNECTION);
        this.factory = factory;
        if (name == null || name.isEmpty())
            throw new IllegalArgumentException(NO_NAME);
        if (options.ttl.compareTo(MIN_TTL) < 0)
            throw new IllegalArgumentException(SHORT_TTL + ", not " + options.ttl);
        if (options.wait.isNegative())
            throw new IllegalArgumentException(NEGATIVE_WAIT);
        this.name = name;
        this.owner = options.owner != null ? options.owner : defaultOwner();
        this.ttl = options.ttl.toNanos();
        long grace = options.grace != null ? options.grace.toNanos() : ttl / 5;
        if (grace < 0 || grace > ttl / 2)
            throw new IllegalArgumentException(BAD_GRACE);
        this.interval = ttl / 3;
        this.trust = ttl - ttl / 10 - grace;
        this.retry = clamp(ttl / 20, TimeUnit.MILLISECONDS.toNanos(50), TimeUnit.SECONDS.toNanos(1));
        this.heartbeats = new Thread(this::keep, "pglease " + name);
        this.heartbeats.setDaemon(true);
    }

    /**
     * Acquires lease {@code name} and keeps it until {@link #close}. The helper's own
     * connection comes from {@code factory}.
     *
     * @throws NotAcquiredException another owner held the lease for the whole wait
     * @throws SQLException the server's error, or the connection error when the server could
     *     not be reached for the whole wait
     */
    public static Lease hold(ConnectionFactory factory, String name, Options options)
            throws SQLException, NotAcquiredException {
        if (options == null)
            options = new Options();
        Lease lease = new Lease(factory, name, options);
        try {
            lease.acquire(options.wait.toNanos());
        } catch (SQLException | NotAcquiredException | RuntimeException e) {
            lease.disconnect();
            throw e;
        }
        lease.armWatchdog();
        lease.heartbeats.start();
        return lease;
    }

    /**
     * {@link #hold(ConnectionFactory, String, Options)} with the helper's own connections made
     * from a libpq connection string (keyword = value pairs or a {@code postgresql://} URI) or
     * a {@code jdbc:postgresql:} URL: see {@link ConnectionFactory#of}.
     *
     * @throws IllegalArgumentException a malformed connection string, before any round trip
     */
    public static Lease hold(String connectionString, String name, Options options)
            throws SQLException, NotAcquiredException {
        return hold(ConnectionFactory.of(connectionString), name, options);
    }

    public String name() {
        return name;
    }

    public String owner() {
        return owner;
    }

    /** The fencing token of this grant. */
    public long token() {
        return token;
    }

    public boolean isLost() {
        return lost.isDone();
    }

    /** Completes, with the exception saying why, when the lease is lost (on the helper's threads). */
    public CompletionStage<LeaseLostException> whenLost() {
        return lost.minimalCompletionStage();
    }

    /** Throws the {@link LeaseLostException} if the lease has been lost. */
    public void check() throws LeaseLostException {
        LeaseLostException e = lost.getNow(null);
        if (e != null)
            throw e;
    }

    /**
     * Fences the transaction open on {@code connection} (autocommit off): checks the lease at
     * once ({@link FencedError} if the token is stale or the lease expired), holds off any
     * new grant of the lease until the transaction ends, and sets {@code lease.fence_token} for
     * the rest of the transaction, so fence triggers accept its INSERTs, UPDATEs and DELETEs.
     *
     * @throws IllegalStateException in autocommit mode, where the token would last one statement
     */
    public void fence(Connection connection) throws SQLException {
        fence(connection, name, token);
    }

    /**
     * Runs {@code work} in a transaction on {@code connection} fenced with {@link #fence}, and
     * commits it (rolls back if work throws). Turns autocommit off for it and restores it
     * after; with autocommit already off, it commits the transaction already open. LF001 from
     * any step throws a {@link FencedError}.
     */
    public <T> T transaction(Connection connection, SqlWork<T> work) throws SQLException {
        return transaction(connection, work, name, token);
    }

    /** The fence of a lease's grant: {@link #fence}, and a session lease's too. */
    static void fence(Connection connection, String name, long token) throws SQLException {
        if (connection == null)
            throw new NullPointerException(NO_CONNECTION);
        if (connection.getAutoCommit())
            throw new IllegalStateException("fence() needs a transaction: call setAutoCommit(false) first, or use transaction()");
        try (PreparedStatement statement = connection.prepareStatement(FENCE)) {
            statement.setString(1, name);
            statement.setLong(2, token);
            statement.setLong(3, token);
            statement.executeQuery().close();
        } catch (SQLException e) {
            throw FencedError.of(e);
        }
    }

    /** A fenced transaction under a grant: {@link #transaction}, and a session lease's too. */
    static <T> T transaction(Connection connection, SqlWork<T> work, String name, long token) throws SQLException {
        if (connection == null)
            throw new NullPointerException(NO_CONNECTION);
        Objects.requireNonNull(work, "work");
        boolean autoCommit = connection.getAutoCommit();
        connection.setAutoCommit(false);
        try {
            fence(connection, name, token);
            T result = work.run(connection);
            connection.commit();
            return result;
        } catch (SQLException e) {
            rollbackQuietly(connection, e);
            throw FencedError.of(e);
        } catch (RuntimeException e) {
            rollbackQuietly(connection, e);
            throw e;
        } finally {
            if (autoCommit && !connection.isClosed())
                connection.setAutoCommit(true);
        }
    }

    /** @deprecated the same as {@link #transaction}, the name every helper uses */
    @Deprecated
    public <T> T inTransaction(Connection connection, SqlWork<T> work) throws SQLException {
        return transaction(connection, work);
    }

    /**
     * Stops the heartbeats and releases the lease, trying for at most 5 s and never past the
     * moment it could expire anyway; a failed release is logged and the lease expires on its
     * own. Calling it again does nothing.
     *
     * @throws LeaseLostException if the lease had been lost, or was no longer held; in
     *     try-with-resources it is suppressed by an exception of the block
     */
    @Override
    public void close() throws LeaseLostException {
        synchronized (lock) {
            if (closed)
                return;
            closed = true;
            stopped = true;
            lock.notifyAll();
            if (watchdogTask != null)
                watchdogTask.cancel(false);
        }
        try {
            // The heartbeat thread releases; a call in flight ends by its deadline.
            heartbeats.join(TimeUnit.NANOSECONDS.toMillis(interval + MAX_RELEASE_WAIT_NANOS) + 1);
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        }
        check();
    }

    @Override
    public String toString() {
        return "Lease[" + name + ", owner " + owner + ", token " + token + (isLost() ? ", lost]" : "]");
    }

    /** Opens a session kept alive like a lease ({@link Session#open}). */
    static Lease openSession(ConnectionFactory factory, Options options) throws SQLException {
        if (options == null)
            options = new Options();
        Lease lease = new Lease(factory, "session", options, true);
        try {
            long sent = System.nanoTime();
            Long id = lease.call(SESSION_OPEN, sent + lease.trust, Long.class, lease.owner,
                    TimeUnit.NANOSECONDS.toMillis(lease.ttl) + " milliseconds");
            lease.token = Objects.requireNonNull(id, "session_open returned NULL");
            lease.lastSuccess = sent;
        } catch (SQLException | RuntimeException e) {
            lease.disconnect();
            throw e;
        }
        lease.armWatchdog();
        lease.heartbeats.start();
        return lease;
    }

    /** The connection factory (a Session's second connection comes from it). */
    ConnectionFactory factory() {
        return factory;
    }

    private void acquire(long waitNanos) throws SQLException, NotAcquiredException {
        long giveUpAt = System.nanoTime() + waitNanos;
        long poll = clamp(ttl / 10, TimeUnit.MILLISECONDS.toNanos(50), TimeUnit.SECONDS.toNanos(1));
        String ttlText = TimeUnit.NANOSECONDS.toMillis(ttl) + " milliseconds";
        while (true) {
            long sent = System.nanoTime();
            // The server queues waiters (first come, first served) and wakes the first when
            // the lease frees up. Each call waits at most half the trust window: a grant later
            // than the whole window could not be trusted at all, since the lease's TTL may have
            // started when the call was sent.
            long wait = clamp(giveUpAt - sent, 0, trust / 2);
            String waitText = TimeUnit.NANOSECONDS.toMicros(wait) + " microseconds";
            Long granted = null; // NULL (not 0) when another owner holds the lease
            try {
                granted = call(ACQUIRE, sent + trust, Long.class, name, owner, ttlText, waitText);
            } catch (SQLException e) {
                if (!isConnectionError(e) || System.nanoTime() - giveUpAt >= 0)
                    throw e;
            }
            if (granted != null) {
                token = granted;
                lastSuccess = sent;
                return;
            }
            long now = System.nanoTime();
            if (now - giveUpAt >= 0)
                throw new NotAcquiredException(name);
            if (now - (sent + wait) >= 0)
                continue; // the server waited: ask again at once
            try { // refused early, or failed: do not spin
                TimeUnit.NANOSECONDS.sleep(Math.min(poll, giveUpAt - now));
            } catch (InterruptedException e) {
                Thread.currentThread().interrupt();
                throw new NotAcquiredException(name);
            }
        }
    }

    /** The heartbeat thread: heartbeats until close() or the loss, then releases. */
    private void keep() {
        long next = lastSuccess + interval;
        boolean failing = false;
        try {
            while (!isLost()) {
                long now = System.nanoTime();
                long trustEnds = lastSuccess + trust;
                if (now - trustEnds >= 0) {
                    lose("no heartbeat succeeded for " + TimeUnit.NANOSECONDS.toMillis(now - lastSuccess) + " ms");
                    return;
                }
                if (now - next < 0) {
                    synchronized (lock) {
                        if (!stopped)
                            TimeUnit.NANOSECONDS.timedWait(lock, Math.min(next, trustEnds) - now);
                        if (stopped)
                            break;
                    }
                    continue;
                }
                Boolean renewed;
                try {
                    renewed = session
                            ? call(SESSION_KEEPALIVE, Math.min(trustEnds, now + interval), Boolean.class, token)
                            : call(HEARTBEAT, Math.min(trustEnds, now + interval), Boolean.class, name, token);
                } catch (SQLException e) {
                    if (!failing)
                        LOG.log(Level.WARNING, "lease \"{0}\": heartbeat failed: {1}; retrying", name, e.getMessage());
                    failing = true;
                    next = System.nanoTime() + retry;
                    continue;
                }
                if (isLost())
                    return;
                if (!Boolean.TRUE.equals(renewed)) {
                    lose("the heartbeat was refused (the lease was revoked, expired or taken over)");
                    return;
                }
                if (failing)
                    LOG.log(Level.WARNING, "lease \"{0}\": heartbeat succeeded again", name);
                failing = false;
                lastSuccess = now;
                next = now + interval;
                armWatchdog();
            }
            if (!isLost())
                release();
        } catch (InterruptedException e) {
            Thread.currentThread().interrupt();
        } finally {
            disconnect();
        }
    }

    private void release() {
        long deadline = Math.min(System.nanoTime() + MAX_RELEASE_WAIT_NANOS, lastSuccess + ttl);
        if (session) {
            try {
                call(SESSION_CLOSE, deadline, Integer.class, token);
            } catch (SQLException e) {
                LOG.log(Level.WARNING, "session {0}: could not close it: {1}; it expires on its own", token, e.getMessage());
            }
            return;
        }
        try {
            if (!Boolean.TRUE.equals(call(RELEASE, deadline, Boolean.class, name, token)))
                lose("it was no longer held when released");
        } catch (SQLException e) {
            LOG.log(Level.WARNING, "lease \"{0}\": could not release it: {1}; it expires on its own", name, e.getMessage());
        }
    }

    private void lose(String reason) {
        LeaseLostException e = new LeaseLostException(name, reason);
        if (lost.complete(e))
            LOG.log(Level.WARNING, e.getMessage());
    }

    /** Schedules the loss for when the lease stops being trusted, unless a heartbeat succeeds first. */
    private void armWatchdog() {
        synchronized (lock) {
            if (stopped)
                return;
            if (watchdogTask != null)
                watchdogTask.cancel(false);
            long delay = lastSuccess + trust - System.nanoTime();
            watchdogTask = WATCHDOG.schedule(() -> {
                long overdue = System.nanoTime() - (lastSuccess + trust);
                if (overdue >= 0)
                    lose("no heartbeat succeeded for " + TimeUnit.NANOSECONDS.toMillis(trust + overdue) + " ms");
            }, Math.max(0, delay), TimeUnit.NANOSECONDS);
        }
    }

    /**
     * One statement on the helper's own connection, returning its one value. Its network
     * timeout is the deadline: a call with no answer by then fails and the driver closes the
     * connection, which is then replaced.
     */
    private <T> T call(String sql, long deadline, Class<T> type, Object... args) throws SQLException {
        try {
            if (connection == null || connection.isClosed()) {
                connection = factory.connect();
                connection.setAutoCommit(true);
                // No server-prepared statements: they break transaction-mode poolers.
                if (connection.isWrapperFor(PGConnection.class))
                    connection.unwrap(PGConnection.class).setPrepareThreshold(0);
            }
            long remaining = TimeUnit.NANOSECONDS.toMillis(deadline - System.nanoTime());
            if (remaining < 1)
                throw new SQLException("no answer from the server in time", "08006");
            connection.setNetworkTimeout(DIRECT, (int) Math.min(Integer.MAX_VALUE, remaining));
            try (PreparedStatement statement = connection.prepareStatement(sql)) {
                for (int i = 0; i < args.length; i++)
                    statement.setObject(i + 1, args[i]);
                try (ResultSet rs = statement.executeQuery()) {
                    rs.next();
                    return rs.getObject(1, type);
                }
            }
        } catch (SQLException e) {
            if (isConnectionError(e))
                disconnect();
            throw e;
        }
    }

    // pgjdbc applies the network timeout itself; it never runs anything on the executor.
    private static final Executor DIRECT = Runnable::run;

    /** Connection failures (SQLSTATE class 08, or none), as opposed to the server's SQL errors. */
    private static boolean isConnectionError(SQLException e) {
        String state = e.getSQLState();
        return state == null || state.startsWith("08");
    }

    private void disconnect() {
        if (connection != null) {
            try {
                connection.close();
            } catch (SQLException ignored) {
                // the connection is being dropped
            }
            connection = null;
        }
    }

    private static void rollbackQuietly(Connection connection, Exception cause) {
        try {
            connection.rollback();
        } catch (SQLException e) {
            cause.addSuppressed(e);
        }
    }

    private static String defaultOwner() {
        String host;
        try {
            host = InetAddress.getLocalHost().getHostName();
        } catch (java.io.IOException e) {
            host = "unknown-host";
        }
        byte[] random = new byte[4];
        new SecureRandom().nextBytes(random);
        StringBuilder hex = new StringBuilder();
        for (byte b : random)
            hex.append(String.format("%02x", b));
        return host + ":" + ProcessHandle.current().pid() + ":" + hex;
    }

    private static long clamp(long value, long low, long high) {
        return Math.max(low, Math.min(high, value));
    }

    private static ScheduledExecutorService watchdog() {
        ScheduledThreadPoolExecutor executor = new ScheduledThreadPoolExecutor(1, runnable -> {
            Thread thread = new Thread(runnable, "pglease watchdog");
            thread.setDaemon(true);
            return thread;
        });
        executor.setRemoveOnCancelPolicy(true);
        return executor;
    }
}
