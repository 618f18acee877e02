package pglease;

import java.sql.Connection;
import java.sql.SQLException;

/** Where the helper gets its own connection: {@code dataSource::getConnection}, or a lambda around DriverManager. */
@FunctionalInterface
public interface ConnectionFactory {
    Connection connect() throws SQLException;
}
