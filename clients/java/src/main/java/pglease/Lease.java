package pglease;

import java.lang.System.Logger.Level;
import java.net.InetAddress;
import java.security.SecureRandom;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.nio.charset.StandardCharsets;
import java.time.Duration;
import java.time.OffsetDateTime;
import java.util.ArrayList;
import java.util.Arrays;
import java.util.Collections;
import java.util.Comparator;
import java.util.LinkedHashMap;
import java.util.List;
import java.util.Map;
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
    static final String BAD_PERMITS = "pglease: permits must be between 1 and 10000";
    static final String PERMITS_AND_SHARED = "pglease: permits and shared exclude each other";
    static final String NO_NAMES = "pglease: no lease names given";
    static final String ONE_NAME = "pglease: setValue needs a grant of one name";

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
    // Semaphore permits and shared grants (lease 1.3): heartbeat, release and the fence take
    // their tokens as they take a lease's.
    private static final String SEMAPHORE_ACQUIRE =
            "SELECT lease.semaphore_acquire(?, ?, ?::pg_catalog.int4, ?::pg_catalog.interval, ?::pg_catalog.interval)";
    private static final String SHARED_ACQUIRE =
            "SELECT lease.lease_acquire_shared(?, ?, ?::pg_catalog.interval, ?::pg_catalog.interval)";
    // All or none: the tokens aligned with the names (as text, "t1,t2"), or NULL holding nothing.
    private static final String ACQUIRE_ALL = "SELECT pg_catalog.array_to_string(lease.lease_acquire_all("
            + "?::pg_catalog.text[], ?, ?::pg_catalog.interval, ?::pg_catalog.interval), ',')";
    // Several names, each with its own token, in the server's order (by bytes): every
    // heartbeat (release) runs; true only if every one was.
    private static final String PAIRS = " FROM ROWS FROM (pg_catalog.unnest(?::pg_catalog.text[]),"
            + " pg_catalog.unnest(?::pg_catalog.int8[])) AS u(n, t)";
    private static final String HEARTBEAT_ALL = "SELECT pg_catalog.bool_and(lease.lease_heartbeat(n, t))" + PAIRS;
    private static final String RELEASE_ALL = "SELECT pg_catalog.bool_and(lease.lease_release(n, t))" + PAIRS;
    // No single token for fence triggers: rows carry their name's token (tokenOf).
    private static final String FENCE_ALL = "SELECT pg_catalog.count(lease.fenced_write(n, t))" + PAIRS;
    static final String SET_VALUE = "SELECT lease.lease_set_value(?, ?, ?::pg_catalog.jsonb)";
    private static final String LEADER = "SELECT owner, token, value::pg_catalog.text, expires_at FROM lease.leader(?)";

    // Signals a loss at its deadline even while the heartbeat thread waits for the network.
    private static final ScheduledExecutorService WATCHDOG = watchdog();

    /** Options of {@link #hold}; the defaults are those of {@code pg_lease run}. */
    public static final class Options {
        private String owner;
        private Duration ttl = Duration.ofSeconds(20);
        private Duration wait = Duration.ZERO;
        private Duration grace;
        private Integer permits;
        private boolean shared;

        /** One of that many permits (1 to 10000) of semaphore {@code name} ({@code lease.semaphore_acquire}). */
        public Options permits(int permits) {
            this.permits = permits;
            return this;
        }

        /** A shared grant beside other shared holders ({@code lease.lease_acquire_shared}); not with permits. */
        public Options shared(boolean shared) {
            this.shared = shared;
            return this;
        }

        /** The options' permits and shared, checked before any round trip. */
        Integer kind() {
            if (permits != null && (permits < 1 || permits > 10000))
                throw new IllegalArgumentException(BAD_PERMITS);
            if (permits != null && shared)
                throw new IllegalArgumentException(PERMITS_AND_SHARED);
            return permits;
        }

        boolean isShared() {
            return shared;
        }

        Duration waitDuration() {
            return wait;
        }

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
    private final Integer permits;
    private final boolean shared;
    private final List<String> names; // holdAll's, in their order; null for one name
    private final Object callLock = new Object(); // the helper's connection, one call at a time

    private long token;
    private long[] tokens; // holdAll's, aligned with names
    private Connection connection; // the helper's own; used by one thread at a time
    // When the last acquire or heartbeat that succeeded was sent (System.nanoTime):
    // the server read its clock after that, so the lease expires no sooner than
    // TTL later (docs/cli.md, "How run keeps the command inside the lease").
    private volatile long lastSuccess;
    private boolean stopped; // guarded by lock
    private ScheduledFuture<?> watchdogTask; // guarded by lock
    private boolean closed;

    private Lease(ConnectionFactory factory, String name, Options options) {
        this(factory, name, options, false, null);
    }

    private Lease(ConnectionFactory factory, String name, Options options, boolean session, List<String> names) {
        this.session = session;
        if (factory == null)
            throw new NullPointerException(NO_CONNECTION);
        this.factory = factory;
        if (names != null) {
            names = checkNames(names);
            name = String.join(", ", names);
        }
        this.names = names;
        if (name == null || name.isEmpty())
            throw new IllegalArgumentException(NO_NAME);
        this.permits = options.kind();
        this.shared = options.shared;
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

    /**
     * Acquires every lease of {@code names} or none ({@code lease.lease_acquire_all}), waiting
     * up to the options' wait (then {@link NotAcquiredException}, holding nothing), and keeps
     * them all until {@link #close}: one heartbeat statement renews every name, and the loss of
     * any is the loss of the whole. {@link #tokenOf} and {@link #tokens} give each name's
     * token; the fenced transaction checks every name with its own token.
     */
    public static Lease holdAll(ConnectionFactory factory, List<String> names, Options options)
            throws SQLException, NotAcquiredException {
        if (options == null)
            options = new Options();
        if (options.permits != null || options.shared)
            throw new IllegalArgumentException("pglease: holdAll takes no permits or shared");
        if (names == null)
            throw new IllegalArgumentException(NO_NAMES);
        Lease lease = new Lease(factory, "", options, false, names);
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

    /** {@link #holdAll(ConnectionFactory, List, Options)} from a connection string. */
    public static Lease holdAll(String connectionString, List<String> names, Options options)
            throws SQLException, NotAcquiredException {
        return holdAll(ConnectionFactory.of(connectionString), names, options);
    }

    static List<String> checkNames(List<String> names) {
        if (names == null || names.isEmpty())
            throw new IllegalArgumentException(NO_NAMES);
        for (String n : names)
            if (n == null || n.isEmpty())
                throw new IllegalArgumentException(NO_NAME);
        return Collections.unmodifiableList(new ArrayList<>(names));
    }

    public String name() {
        return name;
    }

    /** The names held: one, or those of {@link #holdAll} in their order. */
    public List<String> names() {
        return names != null ? names : List.of(name);
    }

    /** Each name's token, in the order of the names. */
    public Map<String, Long> tokens() {
        return tokenMap(names(), names != null ? tokens : new long[] {token});
    }

    /** The token of {@code name}, one of the names held. */
    public long tokenOf(String name) {
        return tokenOf(names(), names != null ? tokens : new long[] {token}, name);
    }

    static Map<String, Long> tokenMap(List<String> names, long[] tokens) {
        Map<String, Long> map = new LinkedHashMap<>();
        for (int i = 0; i < names.size(); i++)
            map.put(names.get(i), tokens[i]);
        return Collections.unmodifiableMap(map);
    }

    static long tokenOf(List<String> names, long[] tokens, String name) {
        int i = names.indexOf(name);
        if (i < 0)
            throw new IllegalArgumentException("pglease: \"" + name + "\" is not one of the names held");
        return tokens[i];
    }

    /**
     * Publishes {@code json} (a JSON text: an address, a role) for this grant
     * ({@code lease.lease_set_value}), for {@link #leader} and the value_set event, on the
     * helper's own connection: false, and nothing changed, if its token is no longer live.
     *
     * @throws IllegalStateException for a grant of several names, or after close()
     */
    public boolean setValue(String json) throws SQLException {
        if (names != null)
            throw new IllegalStateException(ONE_NAME);
        synchronized (lock) {
            if (closed)
                throw new IllegalStateException("pglease: the lease has been released");
        }
        return Boolean.TRUE.equals(call(SET_VALUE, System.nanoTime() + interval, Boolean.class, name, token, json));
    }

    /** {@link #setValue(String)} in the transaction open on {@code connection}, or as one statement. */
    public boolean setValue(Connection connection, String json) throws SQLException {
        if (names != null)
            throw new IllegalStateException(ONE_NAME);
        return setValue(connection, name, token, json);
    }

    static boolean setValue(Connection connection, String name, long token, String json) throws SQLException {
        if (connection == null)
            throw new NullPointerException(NO_CONNECTION);
        try (PreparedStatement statement = connection.prepareStatement(SET_VALUE)) {
            statement.setString(1, name);
            statement.setLong(2, token);
            statement.setString(3, json);
            try (ResultSet rs = statement.executeQuery()) {
                rs.next();
                return rs.getBoolean(1);
            }
        }
    }

    /** One live holder of a name, from {@link #leader}. */
    public static final class Holder {
        private final String owner;
        private final long token;
        private final String value;
        private final OffsetDateTime expiresAt;

        Holder(String owner, long token, String value, OffsetDateTime expiresAt) {
            this.owner = owner;
            this.token = token;
            this.value = value;
            this.expiresAt = expiresAt;
        }

        public String owner() {
            return owner;
        }

        public long token() {
            return token;
        }

        /** What it published (setValue), as JSON text; null before. */
        public String value() {
            return value;
        }

        public OffsetDateTime expiresAt() {
            return expiresAt;
        }

        @Override
        public String toString() {
            return "Holder[" + owner + ", token " + token + ", value " + value + ", expires " + expiresAt + "]";
        }
    }

    /**
     * Who holds {@code name} now and what each published ({@code lease.leader}): one
     * {@link Holder} for an exclusive lease, one per holder of a semaphore or shared lease,
     * none when nobody holds it.
     */
    public static List<Holder> leader(Connection connection, String name) throws SQLException {
        if (connection == null)
            throw new NullPointerException(NO_CONNECTION);
        if (name == null || name.isEmpty())
            throw new IllegalArgumentException(NO_NAME);
        List<Holder> holders = new ArrayList<>();
        try (PreparedStatement statement = connection.prepareStatement(LEADER)) {
            statement.setString(1, name);
            try (ResultSet rs = statement.executeQuery()) {
                while (rs.next())
                    holders.add(new Holder(rs.getString(1), rs.getLong(2), rs.getString(3), rs.getObject(4, OffsetDateTime.class)));
            }
        }
        return holders;
    }

    public String owner() {
        return owner;
    }

    /**
     * The fencing token of this grant.
     *
     * @throws IllegalStateException for several names: use {@link #tokenOf}
     */
    public long token() {
        if (names != null)
            throw new IllegalStateException("pglease: a grant of several names has a token per name: use tokenOf(name)");
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
        fence(connection, names(), names != null ? tokens : new long[] {token});
    }

    /**
     * Runs {@code work} in a transaction on {@code connection} fenced with {@link #fence}, and
     * commits it (rolls back if work throws). Turns autocommit off for it and restores it
     * after; with autocommit already off, it commits the transaction already open. LF001 from
     * any step throws a {@link FencedError}.
     */
    public <T> T transaction(Connection connection, SqlWork<T> work) throws SQLException {
        return transaction(connection, work, names(), names != null ? tokens : new long[] {token});
    }

    /**
     * The fence of a lease's grant: {@link #fence}, and a session lease's too. Several names:
     * each checked with its own token, in the server's order; no {@code lease.fence_token}.
     */
    static void fence(Connection connection, List<String> names, long[] tokens) throws SQLException {
        if (connection == null)
            throw new NullPointerException(NO_CONNECTION);
        if (connection.getAutoCommit())
            throw new IllegalStateException("fence() needs a transaction: call setAutoCommit(false) first, or use transaction()");
        try (PreparedStatement statement = connection.prepareStatement(names.size() == 1 ? FENCE : FENCE_ALL)) {
            if (names.size() == 1) {
                statement.setString(1, names.get(0));
                statement.setLong(2, tokens[0]);
                statement.setLong(3, tokens[0]);
            } else {
                Object[] pairs = byBytes(names, tokens);
                statement.setArray(1, connection.createArrayOf("text", (String[]) pairs[0]));
                statement.setArray(2, connection.createArrayOf("int8", (Long[]) pairs[1]));
            }
            statement.executeQuery().close();
        } catch (SQLException e) {
            throw FencedError.of(e);
        }
    }

    /** The names (String[]) and their tokens (Long[]) in the server's order: by UTF-8 bytes. */
    static Object[] byBytes(List<String> names, long[] tokens) {
        Integer[] order = new Integer[names.size()];
        for (int i = 0; i < order.length; i++)
            order[i] = i;
        Arrays.sort(order, Comparator.comparing((Integer i) -> names.get(i).getBytes(StandardCharsets.UTF_8), Arrays::compareUnsigned));
        String[] sortedNames = new String[order.length];
        Long[] sortedTokens = new Long[order.length];
        for (int i = 0; i < order.length; i++) {
            sortedNames[i] = names.get(order[i]);
            sortedTokens[i] = tokens[order[i]];
        }
        return new Object[] {sortedNames, sortedTokens};
    }

    /** A fenced transaction under a grant: {@link #transaction}, and a session lease's too. */
    static <T> T transaction(Connection connection, SqlWork<T> work, List<String> names, long[] tokens) throws SQLException {
        if (connection == null)
            throw new NullPointerException(NO_CONNECTION);
        Objects.requireNonNull(work, "work");
        boolean autoCommit = connection.getAutoCommit();
        connection.setAutoCommit(false);
        try {
            fence(connection, names, tokens);
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
        if (!heartbeats.isAlive())
            disconnect(); // a setValue after a loss may have connected again
        check();
    }

    @Override
    public String toString() {
        return "Lease[" + name + ", owner " + owner + ", token " + (names != null ? tokens() : token) + (isLost() ? ", lost]" : "]");
    }

    /** Opens a session kept alive like a lease ({@link Session#open}). */
    static Lease openSession(ConnectionFactory factory, Options options) throws SQLException {
        if (options == null)
            options = new Options();
        Lease lease = new Lease(factory, "session", options, true, null);
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
                if (names != null) {
                    String all = call(ACQUIRE_ALL, sent + trust, String.class, names.toArray(new String[0]), owner, ttlText, waitText);
                    if (all != null) {
                        tokens = Arrays.stream(all.split(",")).mapToLong(Long::parseLong).toArray();
                        granted = 0L;
                    }
                } else if (permits != null) {
                    granted = call(SEMAPHORE_ACQUIRE, sent + trust, Long.class, name, owner, permits, ttlText, waitText);
                } else if (shared) {
                    granted = call(SHARED_ACQUIRE, sent + trust, Long.class, name, owner, ttlText, waitText);
                } else {
                    granted = call(ACQUIRE, sent + trust, Long.class, name, owner, ttlText, waitText);
                }
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
                    long deadline = Math.min(trustEnds, now + interval);
                    if (session)
                        renewed = call(SESSION_KEEPALIVE, deadline, Boolean.class, token);
                    else if (names != null)
                        renewed = call(HEARTBEAT_ALL, deadline, Boolean.class, byBytes(names, tokens));
                    else
                        renewed = call(HEARTBEAT, deadline, Boolean.class, name, token);
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
            Boolean released = names != null
                    ? call(RELEASE_ALL, deadline, Boolean.class, byBytes(names, tokens))
                    : call(RELEASE, deadline, Boolean.class, name, token);
            if (!Boolean.TRUE.equals(released))
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
        synchronized (callLock) {
            return callNow(sql, deadline, type, args);
        }
    }

    private <T> T callNow(String sql, long deadline, Class<T> type, Object... args) throws SQLException {
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
                for (int i = 0; i < args.length; i++) {
                    if (args[i] instanceof String[])
                        statement.setArray(i + 1, connection.createArrayOf("text", (String[]) args[i]));
                    else if (args[i] instanceof Long[])
                        statement.setArray(i + 1, connection.createArrayOf("int8", (Long[]) args[i]));
                    else
                        statement.setObject(i + 1, args[i]);
                }
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
        synchronized (callLock) {
            if (connection != null) {
                try {
                    connection.close();
                } catch (SQLException ignored) {
                    // the connection is being dropped
                }
                connection = null;
            }
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
