// A client helper's lease holder for test/netfault/run.sh (Java); see
// partitioned.py for what it prints.
import java.io.BufferedReader;
import java.io.InputStreamReader;
import java.nio.charset.StandardCharsets;
import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.SQLException;
import java.time.Duration;
import java.time.Instant;
import java.time.temporal.ChronoUnit;
import java.util.concurrent.TimeUnit;

import pglease.ConnectionFactory;
import pglease.FencedError;
import pglease.Lease;
import pglease.LeaseLostException;

public class Partitioned {
    public static void main(String[] args) throws Exception {
        String conninfo = System.getenv("NF_CONNINFO");
        String name = System.getenv("NF_NAME");
        long ttl = Long.parseLong(System.getenv("NF_TTL_MS"));
        ConnectionFactory factory = ConnectionFactory.of(conninfo);
        long acquireInvoke = nowMicros();
        try (Lease lease = Lease.hold(factory, name, new Lease.Options().ttl(Duration.ofMillis(ttl)))) {
            long acquireComplete = nowMicros();
            long writeInvoke = nowMicros();
            write(factory, lease, name, "held");
            System.out.println("held " + lease.token() + " " + acquireInvoke + " " + acquireComplete + " " + writeInvoke
                               + " " + nowMicros());
            try {
                lease.whenLost().toCompletableFuture().get(30, TimeUnit.SECONDS);
                System.out.println("lost " + System.currentTimeMillis());
            } catch (java.util.concurrent.TimeoutException e) {
                // not lost
            }
            new BufferedReader(new InputStreamReader(System.in, StandardCharsets.UTF_8)).readLine();
            writeInvoke = nowMicros();
            try {
                write(factory, lease, name, "zombie");
                System.out.println("written " + writeInvoke + " " + nowMicros());
            } catch (FencedError e) {
                System.out.println("fenced " + writeInvoke + " " + nowMicros());
            } catch (SQLException e) {
                System.out.println("error " + writeInvoke + " " + nowMicros() + " " + e);
            }
        } catch (LeaseLostException e) {
            // the end of the block reports the loss
        }
        System.exit(0);
    }

    // The wall clock in microseconds, for the history log.
    static long nowMicros() {
        return ChronoUnit.MICROS.between(Instant.EPOCH, Instant.now());
    }

    static void write(ConnectionFactory factory, Lease lease, String name, String note) throws SQLException {
        try (Connection conn = factory.connect()) {
            conn.setAutoCommit(false);
            lease.transaction(conn, c -> {
                try (PreparedStatement insert = c.prepareStatement("INSERT INTO nf_work (lease_name, note) VALUES (?, ?)")) {
                    insert.setString(1, name);
                    insert.setString(2, note);
                    return insert.executeUpdate();
                }
            });
        }
    }
}
