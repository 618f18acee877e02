package pglease;

import java.sql.Connection;
import java.sql.SQLException;

/** Where the helper gets its own connection: {@code dataSource::getConnection}, or a lambda around DriverManager. */
@FunctionalInterface
public interface ConnectionFactory {
    Connection connect() throws SQLException;

    /**
     * Connections made from a libpq connection string, keyword = value pairs
     * ({@code "host=db.internal dbname=app user=worker"}) or a {@code postgresql://} URI, or
     * from a {@code jdbc:postgresql:} URL: for the helper's own connection, and for the
     * application's. pgjdbc connects over TCP only, so a {@code host} that names a Unix-socket
     * directory is refused.
     *
     * @throws IllegalArgumentException a malformed connection string, at once
     * @throws NullPointerException no connection string
     */
    static ConnectionFactory of(String connectionString) {
        return ConnectionString.parse(connectionString).factory();
    }
}
