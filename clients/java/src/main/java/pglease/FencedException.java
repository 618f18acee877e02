package pglease;

import java.sql.SQLException;

/**
 * The name of {@link FencedError} before 0.2; every LF001 the helper throws is a
 * {@link FencedError}, which extends this class so that {@code catch (FencedException e)} goes
 * on working.
 *
 * @deprecated catch {@link FencedError}, and use {@link FencedError#isFenced}
 */
@Deprecated
public class FencedException extends SQLException {
    private static final long serialVersionUID = 1L;

    /** The SQLSTATE of a rejected fenced write. */
    public static final String SQLSTATE = "LF001";

    /** @deprecated throws a {@link FencedError}: use {@code new FencedError(cause)} */
    @Deprecated
    public FencedException(SQLException cause) {
        this(cause.getMessage(), cause);
    }

    FencedException(String message, SQLException cause) {
        super(message, SQLSTATE, cause);
    }

    /** @deprecated use {@link FencedError#isFenced} */
    @Deprecated
    public static boolean isFenced(SQLException error) {
        return FencedError.isFenced(error);
    }
}
