package pglease;

import java.sql.Connection;
import java.sql.SQLException;

/** The work of a fenced transaction: see {@link Lease#inTransaction}. */
@FunctionalInterface
public interface SqlWork<T> {
    T run(Connection connection) throws SQLException;
}
