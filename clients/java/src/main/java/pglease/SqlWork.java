package pglease;

import java.sql.Connection;
import java.sql.SQLException;

/** The work of a fenced transaction: see {@link Lease#transaction}. */
@FunctionalInterface
public interface SqlWork<T> {
    T run(Connection connection) throws SQLException;
}
