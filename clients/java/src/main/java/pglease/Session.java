package pglease;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Duration;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.CompletionStage;

import org.postgresql.PGConnection;

/**
 * A session of the lease extension (docs/concepts.md, "Sessions"), for try-with-resources: one
 * keepalive, every TTL/3, for every lease acquired or claimed under it, with the loss signal
 * of a {@link Lease} ({@link #isLost}, {@link #check}, {@link #whenLost}). {@link #close}
 * closes it, releasing every lease it still holds at once.
 *
 * <p>{@link #acquire}, {@link #claim}, {@link #surplus} and the leases' {@code release} and
 * {@code checkpoint} run on a second connection from the factory, so a waiting acquire never
 * delays a keepalive. The session is not bound to its connection, so it works through
 * PgBouncer in transaction mode. Methods are safe to call from any thread.
 */
public final class Session implements AutoCloseable {
    private static final String ACQUIRE = "SELECT lease.session_acquire(?, ?, ?::pg_catalog.interval)";
    private static final String CLAIM = "SELECT name, token, state::pg_catalog.text FROM lease.claim(?, ?, ?)";
    private static final String SURPLUS = "SELECT name FROM lease.surplus(?, ?) AS name";
    static final String CHECKPOINT = "SELECT lease.checkpoint(?, ?, ?::pg_catalog.jsonb)";
    private static final String RELEASE = "SELECT lease.lease_release(?, ?)";
    private static final String NO_POOL = "pglease: the pool name must not be empty";
    private static final String SEMAPHORE_ACQUIRE = "SELECT lease.session_semaphore_acquire(?, ?, ?::pg_catalog.int4, ?::pg_catalog.interval)";
    private static final String SHARED_ACQUIRE = "SELECT lease.session_acquire_shared(?, ?, ?::pg_catalog.interval)";
    // The tokens as text ("t1,t2"), or NULL holding nothing.
    private static final String ACQUIRE_ALL = "SELECT pg_catalog.array_to_string(lease.session_acquire_all("
            + "?, ?::pg_catalog.text[], ?::pg_catalog.interval), ',')";
    private static final String RELEASE_ALL = "SELECT pg_catalog.bool_and(lease.lease_release(n, t)) FROM ROWS FROM ("
            + "pg_catalog.unnest(?::pg_catalog.text[]), pg_catalog.unnest(?::pg_catalog.int8[])) AS u(n, t)";

    private final Lease keeper;
    private Connection ops; // guarded by this

    private Session(Lease keeper) {
        this.keeper = keeper;
    }

    /**
     * Opens a session and keeps it alive until {@link #close}. {@code factory} and the options'
     * ttl, grace and owner are those of {@link Lease#hold}; their wait is not used.
     */
    public static Session open(ConnectionFactory factory, Lease.Options options) throws SQLException {
        return new Session(Lease.openSession(factory, options));
    }

    /** {@link #open(ConnectionFactory, Lease.Options)} with connections from a libpq connection string or JDBC URL. */
    public static Session open(String connectionString, Lease.Options options) throws SQLException {
        return open(ConnectionFactory.of(connectionString), options);
    }

    /** The session's id. */
    public long id() {
        return keeper.token();
    }

    public boolean isLost() {
        return keeper.isLost();
    }

    /** Throws the {@link LeaseLostException} if the session has been lost. */
    public void check() throws LeaseLostException {
        keeper.check();
    }

    /** Completes, with the exception saying why, when the session is lost. */
    public CompletionStage<LeaseLostException> whenLost() {
        return keeper.whenLost();
    }

    /** Acquires lease {@code name} under the session, waiting up to {@code wait} in the server's queue. */
    /**
     * Acquires {@code name} under the session as {@link #acquire(String, Duration)}, with the
     * options' wait, and their {@code permits} (a semaphore permit,
     * {@code lease.session_semaphore_acquire}) or {@code shared} (a shared grant,
     * {@code lease.session_acquire_shared}); their ttl, owner and grace are the session's.
     */
    public SessionLease acquire(String name, Lease.Options options) throws SQLException, LeaseException {
        if (options == null)
            options = new Lease.Options();
        Integer permits = options.kind();
        if (permits == null && !options.isShared())
            return acquire(name, options.waitDuration());
        if (name == null || name.isEmpty())
            throw new IllegalArgumentException(Lease.NO_NAME);
        String wait = (options.waitDuration().toNanos() / 1000) + " microseconds";
        List<Object[]> rows = permits != null
                ? query(SEMAPHORE_ACQUIRE, 1, id(), name, permits, wait)
                : query(SHARED_ACQUIRE, 1, id(), name, wait);
        Object token = rows.get(0)[0];
        if (token == null)
            throw new NotAcquiredException(name);
        return new SessionLease(this, name, ((Number) token).longValue(), null);
    }

    /**
     * Acquires every lease of {@code names} under the session, or none
     * ({@code lease.session_acquire_all}), waiting up to {@code wait}; then
     * {@link NotAcquiredException}. One {@link SessionLease} with a token per name.
     */
    public SessionLease acquireAll(List<String> names, Duration wait) throws SQLException, LeaseException {
        names = Lease.checkNames(names);
        if (wait == null || wait.isNegative())
            throw new IllegalArgumentException(Lease.NEGATIVE_WAIT);
        Object all = query(ACQUIRE_ALL, 1, id(), names.toArray(new String[0]), (wait.toNanos() / 1000) + " microseconds").get(0)[0];
        if (all == null)
            throw new NotAcquiredException(String.join(", ", names));
        long[] tokens = java.util.Arrays.stream(((String) all).split(",")).mapToLong(Long::parseLong).toArray();
        return new SessionLease(this, names, tokens);
    }

    boolean releaseAll(List<String> names, long[] tokens) throws SQLException, LeaseException {
        Object[] pairs = Lease.byBytes(names, tokens);
        return Boolean.TRUE.equals(query(RELEASE_ALL, 1, pairs[0], pairs[1]).get(0)[0]);
    }

    boolean setValue(String name, long token, String json) throws SQLException, LeaseException {
        return Boolean.TRUE.equals(query(Lease.SET_VALUE, 1, name, token, json).get(0)[0]);
    }

    public SessionLease acquire(String name, Duration wait) throws SQLException, LeaseException {
        if (name == null || name.isEmpty())
            throw new IllegalArgumentException(Lease.NO_NAME);
        if (wait == null || wait.isNegative())
            throw new IllegalArgumentException(Lease.NEGATIVE_WAIT);
        List<Object[]> rows = query(ACQUIRE, 1, id(), name, (wait.toNanos() / 1000) + " microseconds");
        Object token = rows.get(0)[0];
        if (token == null)
            throw new NotAcquiredException(name);
        return new SessionLease(this, name, ((Number) token).longValue(), null);
    }

    /** The new grants of the session's fair share of {@code pool}, each with its last checkpointed state (JSON text). */
    public List<SessionLease> claim(String pool) throws SQLException, LeaseException {
        return claim(pool, null);
    }

    /** As {@link #claim(String)}, at most {@code max} of them. */
    public List<SessionLease> claim(String pool, Integer max) throws SQLException, LeaseException {
        if (pool == null || pool.isEmpty())
            throw new IllegalArgumentException(NO_POOL);
        List<SessionLease> claimed = new ArrayList<>();
        for (Object[] row : query(CLAIM, 3, pool, id(), max))
            claimed.add(new SessionLease(this, (String) row[0], ((Number) row[1]).longValue(), (String) row[2]));
        return claimed;
    }

    /** The names this session holds in {@code pool} beyond its fair share, for it to release. */
    public List<String> surplus(String pool) throws SQLException, LeaseException {
        if (pool == null || pool.isEmpty())
            throw new IllegalArgumentException(NO_POOL);
        List<String> names = new ArrayList<>();
        for (Object[] row : query(SURPLUS, 1, pool, id()))
            names.add((String) row[0]);
        return names;
    }

    boolean release(String name, long token) throws SQLException, LeaseException {
        return Boolean.TRUE.equals(query(RELEASE, 1, name, token).get(0)[0]);
    }

    boolean checkpoint(String name, long token, String state) throws SQLException, LeaseException {
        return Boolean.TRUE.equals(query(CHECKPOINT, 1, name, token, state).get(0)[0]);
    }

    /**
     * Stops the keepalives and closes the session, releasing every lease it still holds.
     *
     * @throws LeaseLostException if the session had been lost
     */
    @Override
    public void close() throws LeaseLostException {
        try {
            keeper.close();
        } finally {
            synchronized (this) {
                if (ops != null) {
                    try {
                        ops.close();
                    } catch (SQLException ignored) {
                        // the connection is being dropped
                    }
                    ops = null;
                }
            }
        }
    }

    @Override
    public String toString() {
        return "Session[" + id() + (isLost() ? ", lost]" : "]");
    }

    private synchronized List<Object[]> query(String sql, int columns, Object... args) throws SQLException, LeaseException {
        check();
        if (ops == null || ops.isClosed()) {
            ops = keeper.factory().connect();
            ops.setAutoCommit(true);
            // No server-prepared statements: they break transaction-mode poolers.
            if (ops.isWrapperFor(PGConnection.class))
                ops.unwrap(PGConnection.class).setPrepareThreshold(0);
        }
        try (PreparedStatement statement = ops.prepareStatement(sql)) {
            for (int i = 0; i < args.length; i++) {
                if (args[i] == null)
                    statement.setNull(i + 1, java.sql.Types.INTEGER);
                else if (args[i] instanceof String[])
                    statement.setArray(i + 1, ops.createArrayOf("text", (String[]) args[i]));
                else if (args[i] instanceof Long[])
                    statement.setArray(i + 1, ops.createArrayOf("int8", (Long[]) args[i]));
                else
                    statement.setObject(i + 1, args[i]);
            }
            List<Object[]> rows = new ArrayList<>();
            try (ResultSet rs = statement.executeQuery()) {
                while (rs.next()) {
                    Object[] row = new Object[columns];
                    for (int i = 0; i < columns; i++)
                        row[i] = rs.getObject(i + 1);
                    rows.add(row);
                }
            }
            return rows;
        } catch (SQLException e) {
            if ("LF003".equals(e.getSQLState()))
                throw new LeaseLostException("session " + id(), e.getMessage());
            throw FencedError.of(e);
        }
    }
}
