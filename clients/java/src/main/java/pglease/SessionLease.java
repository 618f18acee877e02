package pglease;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.util.List;
import java.util.Map;

/** A lease held under a {@link Session}: live while the session is. */
public final class SessionLease {
    private final Session session;
    private final String name;
    private final long token;
    private final String state;
    private final List<String> names;
    private final long[] tokens;

    SessionLease(Session session, String name, long token, String state) {
        this.session = session;
        this.name = name;
        this.token = token;
        this.state = state;
        this.names = List.of(name);
        this.tokens = new long[] {token};
    }

    /** A grant of several names (Session.acquireAll), each with its token. */
    SessionLease(Session session, List<String> names, long[] tokens) {
        this.session = session;
        this.name = String.join(", ", names);
        this.token = 0;
        this.state = null;
        this.names = names;
        this.tokens = tokens;
    }

    /** The names held: one, or those of acquireAll in their order. */
    public List<String> names() {
        return names;
    }

    /** Each name's token, in the order of the names. */
    public Map<String, Long> tokens() {
        return Lease.tokenMap(names, tokens);
    }

    /** The token of {@code name}, one of the names held. */
    public long tokenOf(String name) {
        return Lease.tokenOf(names, tokens, name);
    }

    /** Publishes {@code json} for this grant, as {@link Lease#setValue(String)}, on the session's connection. */
    public boolean setValue(String json) throws SQLException, LeaseException {
        if (names.size() != 1)
            throw new IllegalStateException(Lease.ONE_NAME);
        return session.setValue(name, token, json);
    }

    /** {@link #setValue(String)} in the transaction open on {@code connection}. */
    public boolean setValue(Connection connection, String json) throws SQLException {
        if (names.size() != 1)
            throw new IllegalStateException(Lease.ONE_NAME);
        return Lease.setValue(connection, name, token, json);
    }

    public Session session() {
        return session;
    }

    public String name() {
        return name;
    }

    /** The fencing token of this grant. */
    public long token() {
        if (names.size() != 1)
            throw new IllegalStateException("pglease: a grant of several names has a token per name: use tokenOf(name)");
        return token;
    }

    /** What the pool resource's last holder checkpointed, as JSON text (null for {@link Session#acquire}). */
    public String state() {
        return state;
    }

    /** Throws the {@link LeaseLostException} if the session has been lost. */
    public void check() throws LeaseLostException {
        session.check();
    }

    /** As {@link Lease#fence}, with this grant's token. */
    public void fence(Connection connection) throws SQLException {
        Lease.fence(connection, names, tokens);
    }

    /** As {@link Lease#transaction}, with this grant's token. */
    public <T> T transaction(Connection connection, SqlWork<T> work) throws SQLException {
        return Lease.transaction(connection, work, names, tokens);
    }

    /**
     * Stores {@code jsonState} as the resource's progress under this grant's token, in the
     * transaction open on {@code connection} (atomic with your writes there): false, and
     * nothing changed, if the token is stale.
     */
    public boolean checkpoint(Connection connection, String jsonState) throws SQLException {
        if (connection == null)
            throw new NullPointerException(Lease.NO_CONNECTION);
        try (PreparedStatement statement = connection.prepareStatement(Session.CHECKPOINT)) {
            statement.setString(1, name);
            statement.setLong(2, token);
            statement.setString(3, jsonState);
            try (ResultSet rs = statement.executeQuery()) {
                rs.next();
                return rs.getBoolean(1);
            }
        }
    }

    /** As {@link #checkpoint(Connection, String)}, on the session's own connection. */
    public boolean checkpoint(String jsonState) throws SQLException, LeaseException {
        return session.checkpoint(name, token, jsonState);
    }

    /** Releases this lease now (the session keeps its others): false if it was no longer held. */
    public boolean release() throws SQLException, LeaseException {
        if (names.size() != 1)
            return session.releaseAll(names, tokens);
        return session.release(name, token);
    }

    @Override
    public String toString() {
        return "SessionLease[" + name + ", token " + token + "]";
    }
}
