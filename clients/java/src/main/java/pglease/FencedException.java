package pglease;

import java.sql.SQLException;

/**
 * SQLSTATE LF001: the server rejected a write made under a stale or expired fencing token.
 * The transaction is aborted; stop working under the lease. {@link Lease#fence} and
 * {@link Lease#inTransaction} throw it; its cause is the driver's exception.
 */
public class FencedException extends SQLException {
    private static final long serialVersionUID = 1L;

    /** The SQLSTATE of a rejected fenced write. */
    public static final String SQLSTATE = "LF001";

    public FencedException(SQLException cause) {
        super(cause.getMessage(), SQLSTATE, cause);
    }

    /** Whether {@code error} is LF001: a FencedException, or the driver's exception with that SQLSTATE. */
    public static boolean isFenced(SQLException error) {
        return error != null && SQLSTATE.equals(error.getSQLState());
    }

    static SQLException of(SQLException error) {
        return isFenced(error) && !(error instanceof FencedException) ? new FencedException(error) : error;
    }
}
