package pglease;

import java.lang.System.Logger.Level;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.sql.Statement;
import java.sql.Timestamp;
import java.time.Instant;
import java.util.ArrayDeque;
import java.util.Deque;
import java.util.HashMap;
import java.util.Iterator;
import java.util.Map;
import java.util.NoSuchElementException;
import java.util.Objects;
import java.util.TreeMap;
import java.util.concurrent.Executor;
import java.util.regex.Matcher;
import java.util.regex.Pattern;

import org.postgresql.PGConnection;
import org.postgresql.PGNotification;

/**
 * Every lease event, in the order of their positions in {@code lease.history}, each once, for
 * as long as the caller iterates; for try-with-resources:
 *
 * <pre>{@code
 * try (Watch watch = Watch.open(ConnectionFactory.of(url), new Watch.Options().since(lastPosition))) {
 *     while (watch.hasNext()) { Watch.Event event = watch.next(); ... }
 * }
 * }</pre>
 *
 * <p>{@link #next} blocks until the next event. A lost or silent connection is replaced, and
 * what happened meanwhile is replayed from {@code lease.history} (docs/reference.md,
 * "Resuming a watch"); each loss is logged (System.Logger "pglease", WARNING). Needs lease 1.4
 * and {@code lease.record_history} (events without a position come as they arrive). Not for
 * several threads at once.
 */
public final class Watch implements Iterator<Watch.Event>, AutoCloseable {
    static final String BAD_SINCE = "pglease: since must be a position XID/N (an event's position)";
    private static final System.Logger LOG = System.getLogger("pglease");
    private static final String LISTEN = "SELECT lease.listen_events()";
    private static final String HORIZON = "SELECT lease.events_horizon(?)::pg_catalog.text";
    // From a position, or (with a time and no position yet) from a time on.
    private static final String EVENTS_AFTER = "SELECT xid::pg_catalog.text, ordinal, event, name, token, owner, session"
            + " FROM lease.history WHERE CASE WHEN ?::pg_catalog.timestamptz IS NULL"
            + " THEN (xid, ordinal) > (?::pg_catalog.xid8, ?::pg_catalog.int8)"
            + " ELSE at >= ?::pg_catalog.timestamptz END ORDER BY history.xid, history.ordinal";
    private static final Pattern POSITION = Pattern.compile("([0-9]+)/([0-9]+)");
    // While events wait for their horizon, how often to ask for it; while nothing happens, how
    // often to ask anyway (a partitioned connection shows itself by not answering), and how long
    // an answer may take: Java cannot set TCP_USER_TIMEOUT, so a call without an answer by then
    // (the socket's read timeout) breaks the connection, all but the first horizon of each
    // connection, which waits for the transactions in progress.
    private static final long HORIZON_INTERVAL_MS = 50;
    private static final long PROBE_INTERVAL_MS = 5000;
    private static final int ANSWER_TIMEOUT_MS = 10000;
    private static final Executor DIRECT = Runnable::run;

    /** Where the watch starts, and how soon it reconnects. */
    public static final class Options {
        private long[] since;
        private Instant sinceTime;
        private long reconnectIntervalMillis = 1000;

        /**
         * Resume after a position ({@link Event#position} of an event seen earlier); null: none.
         *
         * @throws IllegalArgumentException not a position {@code XID/N}
         */
        public Options since(String position) {
            if (position == null) {
                since = null;
                return this;
            }
            long[] key = positionKey(position);
            if (key == null) {
                throw new IllegalArgumentException(BAD_SINCE + ", not \"" + position + "\"");
            }
            since = key;
            sinceTime = null;
            return this;
        }

        /** Start with the events recorded from this time on. */
        public Options since(Instant time) {
            sinceTime = Objects.requireNonNull(time, "time");
            since = null;
            return this;
        }

        /** The pause before connecting again after a lost connection; default 1 s. */
        public Options reconnectInterval(java.time.Duration interval) {
            if (interval.isNegative()) {
                throw new IllegalArgumentException("pglease: the reconnect interval must not be negative");
            }
            reconnectIntervalMillis = interval.toMillis();
            return this;
        }
    }

    /** A lease event (docs/concepts.md, "Events and history"). */
    public static final class Event {
        private final String event;
        private final String name;
        private final Long token;
        private final String owner;
        private final Long session;
        private final String position;
        private final String value;
        private final boolean replayed;

        Event(String event, String name, Long token, String owner, Long session, String position, String value,
                boolean replayed) {
            this.event = event;
            this.name = name;
            this.token = token;
            this.owner = owner;
            this.session = session;
            this.position = position;
            this.value = value;
            this.replayed = replayed;
        }

        /** acquired, released, revoked, expired, session_closed, value_set. */
        public String event() {
            return event;
        }

        /** Null for session_closed. */
        public String name() {
            return name;
        }

        public Long token() {
            return token;
        }

        public String owner() {
            return owner;
        }

        public Long session() {
            return session;
        }

        /** "XID/N", to resume from; null for an event not recorded in lease.history. */
        public String position() {
            return position;
        }

        /** What an acquired or value_set event published, as JSON; null when replayed (not in history). */
        public String value() {
            return value;
        }

        /** Read from lease.history rather than received live. */
        public boolean replayed() {
            return replayed;
        }

        @Override
        public String toString() {
            return event + " " + name + " " + token + " " + owner + " " + position;
        }
    }

    private final ConnectionFactory factory;
    private final long retryMillis;
    private final Instant sinceTime;
    // Everything up to it has been returned (null: not known yet).
    private long[] resume;
    private final Deque<Event> ready = new ArrayDeque<>();
    // The events of this connection waiting for their horizon, by position.
    private final TreeMap<long[], Event> pending = new TreeMap<>(Watch::compare);
    private Connection connection;
    private String channel;
    private boolean requested;
    private long lastCall;
    private boolean closed;

    private Watch(ConnectionFactory factory, Options options) {
        this.factory = factory;
        this.retryMillis = options.reconnectIntervalMillis;
        this.resume = options.since;
        this.sinceTime = options.sinceTime;
    }

    /** Starts watching; connects at the first {@link #hasNext} or {@link #next}. */
    public static Watch open(ConnectionFactory factory, Options options) {
        return new Watch(Objects.requireNonNull(factory, Lease.NO_CONNECTION), Objects.requireNonNull(options, "options"));
    }

    /** The same, from a libpq connection string (see {@link ConnectionFactory#of}). */
    public static Watch open(String connectionString, Options options) {
        return open(ConnectionFactory.of(connectionString), options);
    }

    /** True until {@link #close}: a watch has no last event. */
    @Override
    public boolean hasNext() {
        return !closed;
    }

    /**
     * The next event, waiting for it as long as it takes.
     *
     * @throws NoSuchElementException after {@link #close}
     * @throws IllegalStateException an error of the server itself (a lease older than 1.4), or
     *     an interrupt while waiting to reconnect
     */
    @Override
    public Event next() {
        while (ready.isEmpty()) {
            if (closed) {
                throw new NoSuchElementException("pglease: the watch is closed");
            }
            try {
                if (connection == null) {
                    connect();
                } else {
                    step();
                }
            } catch (SQLException e) {
                String state = e.getSQLState();
                disconnect();
                // No lost connection: it would come again.
                if (state != null && !state.startsWith("08") && !state.startsWith("57P")) {
                    throw new IllegalStateException(e.getMessage(), e);
                }
                LOG.log(Level.WARNING, "pglease: watch: connection lost ({0}); reconnecting", e.getMessage());
                try {
                    Thread.sleep(retryMillis);
                } catch (InterruptedException interrupted) {
                    Thread.currentThread().interrupt();
                    throw new IllegalStateException("pglease: interrupted", interrupted);
                }
            }
        }
        return ready.removeFirst();
    }

    /** Stops watching and closes the connection. */
    @Override
    public void close() {
        closed = true;
        disconnect();
    }

    private void connect() throws SQLException {
        pending.clear();
        connection = factory.connect();
        connection.setAutoCommit(true);
        try (Statement statement = connection.createStatement()) {
            statement.execute(LISTEN);
        }
        // Writers that looked for a watcher before this one listened sent nothing: wait for
        // them, so that the replay has their events. As long as it takes.
        connection.setNetworkTimeout(DIRECT, 0);
        long horizon = horizon(true);
        connection.setNetworkTimeout(DIRECT, ANSWER_TIMEOUT_MS);
        if (resume == null && sinceTime == null) {
            resume = new long[] {horizon, 0};
        }
        long[] after = resume != null ? resume : new long[] {0, 0};
        Timestamp since = resume != null ? null : Timestamp.from(sinceTime);
        try (PreparedStatement statement = connection.prepareStatement(EVENTS_AFTER)) {
            statement.setTimestamp(1, since);
            statement.setString(2, Long.toUnsignedString(after[0]));
            statement.setLong(3, after[1]);
            statement.setTimestamp(4, since);
            try (ResultSet rows = statement.executeQuery()) {
                while (rows.next()) {
                    String position = rows.getString(1) + "/" + rows.getLong(2);
                    pend(positionKey(position), new Event(rows.getString(3), rows.getString(4), nullableLong(rows, 5),
                            rows.getString(6), nullableLong(rows, 7), position, null, true));
                }
            }
        }
        // The horizon call above notifies this connection at its commit.
        requested = true;
        lastCall = System.nanoTime();
        channel = "lease_horizon_" + connection.unwrap(PGConnection.class).getBackendPID();
    }

    // One round: what has arrived, then a wait or a horizon call.
    private void step() throws SQLException {
        long interval = !pending.isEmpty() && !requested ? HORIZON_INTERVAL_MS : PROBE_INTERVAL_MS;
        long waitMillis = interval - (System.nanoTime() - lastCall) / 1_000_000;
        PGNotification[] notifications =
                connection.unwrap(PGConnection.class).getNotifications(waitMillis > 0 ? (int) waitMillis : -1);
        if (notifications != null && notifications.length > 0) {
            for (PGNotification notification : notifications) {
                received(notification);
            }
            return;
        }
        if (waitMillis > 0 && (System.nanoTime() - lastCall) / 1_000_000 < interval) {
            return;
        }
        horizon(false);
        requested = true;
        lastCall = System.nanoTime();
    }

    private void received(PGNotification notification) {
        if (notification.getName().equals(channel)) {
            requested = false;
            long[] passed = {Long.parseUnsignedLong(notification.getParameter()), 0};
            while (!pending.isEmpty() && compare(pending.firstKey(), passed) < 0) {
                ready.addLast(pending.pollFirstEntry().getValue());
            }
            if (resume == null || compare(resume, passed) < 0) {
                resume = passed;
            }
            return;
        }
        Map<String, String> fields = flatJson(notification.getParameter());
        String position = fields.get("position");
        Event event = new Event(fields.get("event"), fields.get("name"), parseLong(fields.get("token")), fields.get("owner"),
                parseLong(fields.get("session")), position, fields.get("value"), false);
        long[] key = positionKey(position);
        if (key == null) {
            ready.addLast(event); // not recorded in history: as it comes
        } else {
            pend(key, event);
        }
    }

    private void pend(long[] key, Event event) {
        if (resume != null && compare(key, resume) <= 0) {
            return; // returned already
        }
        pending.putIfAbsent(key, event);
    }

    private long horizon(boolean settle) throws SQLException {
        try (PreparedStatement statement = connection.prepareStatement(HORIZON)) {
            statement.setBoolean(1, settle);
            try (ResultSet rows = statement.executeQuery()) {
                rows.next();
                return Long.parseUnsignedLong(rows.getString(1));
            }
        }
    }

    private void disconnect() {
        if (connection != null) {
            try {
                connection.abort(DIRECT);
            } catch (SQLException e) {
                // dropped anyway
            }
            connection = null;
        }
    }

    static long[] positionKey(String text) {
        Matcher match = text == null ? null : POSITION.matcher(text);
        if (match == null || !match.matches()) {
            return null;
        }
        try {
            return new long[] {Long.parseUnsignedLong(match.group(1)), Long.parseLong(match.group(2))};
        } catch (NumberFormatException e) {
            return null;
        }
    }

    private static int compare(long[] a, long[] b) {
        int byXid = Long.compareUnsigned(a[0], b[0]);
        return byXid != 0 ? byXid : Long.compare(a[1], b[1]);
    }

    private static Long nullableLong(ResultSet rows, int column) throws SQLException {
        long value = rows.getLong(column);
        return rows.wasNull() ? null : value;
    }

    private static Long parseLong(String text) {
        return text == null ? null : Long.valueOf(text);
    }

    /**
     * The members of a notification's JSON object: strings unescaped, numbers as their text,
     * null as null, objects and arrays (a published value) as their JSON text.
     */
    static Map<String, String> flatJson(String text) {
        Map<String, String> members = new HashMap<>();
        int[] at = {skipSpace(text, 0)};
        expect(text, at, '{');
        while (true) {
            at[0] = skipSpace(text, at[0]);
            if (text.charAt(at[0]) == '}') {
                break;
            }
            String key = string(text, at);
            at[0] = skipSpace(text, at[0]);
            expect(text, at, ':');
            at[0] = skipSpace(text, at[0]);
            members.put(key, value(text, at));
            at[0] = skipSpace(text, at[0]);
            if (text.charAt(at[0]) == ',') {
                at[0]++;
            }
        }
        return members;
    }

    private static String value(String text, int[] at) {
        char c = text.charAt(at[0]);
        if (c == '"') {
            return string(text, at);
        }
        int start = at[0];
        if (c == '{' || c == '[') {
            int depth = 0;
            do {
                char d = text.charAt(at[0]);
                if (d == '"') {
                    string(text, at);
                    continue;
                }
                if (d == '{' || d == '[') {
                    depth++;
                } else if (d == '}' || d == ']') {
                    depth--;
                }
                at[0]++;
            } while (depth > 0);
            return text.substring(start, at[0]);
        }
        while (at[0] < text.length() && ",}] \t\r\n".indexOf(text.charAt(at[0])) < 0) {
            at[0]++;
        }
        String literal = text.substring(start, at[0]);
        return literal.equals("null") ? null : literal;
    }

    private static String string(String text, int[] at) {
        expect(text, at, '"');
        StringBuilder out = new StringBuilder();
        while (true) {
            char c = text.charAt(at[0]++);
            if (c == '"') {
                return out.toString();
            }
            if (c != '\\') {
                out.append(c);
                continue;
            }
            char e = text.charAt(at[0]++);
            switch (e) {
                case 'b': out.append('\b'); break;
                case 'f': out.append('\f'); break;
                case 'n': out.append('\n'); break;
                case 'r': out.append('\r'); break;
                case 't': out.append('\t'); break;
                case 'u':
                    out.append((char) Integer.parseInt(text.substring(at[0], at[0] + 4), 16));
                    at[0] += 4;
                    break;
                default: out.append(e);
            }
        }
    }

    private static int skipSpace(String text, int at) {
        while (at < text.length() && Character.isWhitespace(text.charAt(at))) {
            at++;
        }
        return at;
    }

    private static void expect(String text, int[] at, char c) {
        if (at[0] >= text.length() || text.charAt(at[0]) != c) {
            throw new IllegalStateException("pglease: watch: a notification that is no event: " + text);
        }
        at[0]++;
    }
}
