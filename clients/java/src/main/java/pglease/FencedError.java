package pglease;

import java.sql.SQLException;

import org.postgresql.util.PSQLException;
import org.postgresql.util.ServerErrorMessage;

/**
 * SQLSTATE LF001: the server rejected a write made under a stale or expired fencing token.
 * The transaction is aborted; stop working under the lease. {@link Lease#fence} and
 * {@link Lease#transaction} throw it; its cause is the driver's exception, its message the
 * server's with its DETAIL (which grant, since when), and {@link #getDetail} the DETAIL alone.
 * It is a {@link FencedException} too, the name it had before 0.2, so that existing
 * {@code catch (FencedException e)} blocks go on catching it.
 */
@SuppressWarnings("deprecation") // extends the deprecated name on purpose: see above
public class FencedError extends FencedException {
    private static final long serialVersionUID = 1L;

    private final String detail;

    public FencedError(SQLException cause) {
        super(messageOf(cause), cause);
        this.detail = detailOf(cause);
    }

    /** The server's DETAIL, or null if it sent none. */
    public String getDetail() {
        return detail;
    }

    /** Whether {@code error} is LF001: a FencedError, or the driver's exception with that SQLSTATE. */
    public static boolean isFenced(SQLException error) {
        return error != null && SQLSTATE.equals(error.getSQLState());
    }

    static SQLException of(SQLException error) {
        return isFenced(error) && !(error instanceof FencedError) ? new FencedError(error) : error;
    }

    private static String detailOf(SQLException cause) {
        if (cause instanceof PSQLException) {
            ServerErrorMessage server = ((PSQLException) cause).getServerErrorMessage();
            if (server != null)
                return server.getDetail();
        }
        return null;
    }

    private static String messageOf(SQLException cause) {
        String message = cause.getMessage();
        String detail = detailOf(cause);
        if (detail != null && (message == null || !message.contains(detail)))
            message = message + "\n  Detail: " + detail;
        return message;
    }
}
