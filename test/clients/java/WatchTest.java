// Tests of the Java helper's Watch that need no partition: where it starts
// (since a position, since an Instant) and bad input; run.sh partitions the
// README's watch example. Part of ClientsTest.
package clientstest;

import java.sql.Connection;
import java.sql.PreparedStatement;
import java.sql.ResultSet;
import java.sql.SQLException;
import java.time.Instant;
import java.util.ArrayList;
import java.util.List;
import java.util.concurrent.atomic.AtomicBoolean;

import pglease.Watch;

final class WatchTest {
    private WatchTest() {
    }

    static void events(String base, int n) throws SQLException {
        for (int i = 1; i <= n; i++)
            ClientsTest.admin("SELECT lease.lease_acquire(?, 'watch-test', '1 hour')", base + "-" + i);
    }

    /** "position token" of lease.history's rows matching where (?) up to position last, in position order. */
    static List<String> history(String where, Object from, String last) throws SQLException {
        try (Connection c = ClientsTest.connect();
                PreparedStatement s = c.prepareStatement("SELECT xid || '/' || ordinal || ' ' || coalesce(token::text, '-') FROM lease.history"
                        + " WHERE " + where + " AND (xid, ordinal) <= (split_part(?, '/', 1)::xid8, split_part(?, '/', 2)::int8) ORDER BY xid, ordinal")) {
            s.setObject(1, from);
            s.setString(2, last);
            s.setString(3, last);
            List<String> rows = new ArrayList<>();
            try (ResultSet rs = s.executeQuery()) {
                while (rs.next())
                    rows.add(rs.getString(1));
            }
            return rows;
        }
    }

    /**
     * Watches until the event of name end-1 (made once the first event came, or after 15 s if none came); "position token"
     * of each, replayed flags.
     */
    static List<String> until(Watch.Options options, String end, List<Boolean> replayed) throws SQLException {
        List<String> rows = new ArrayList<>();
        AtomicBoolean made = new AtomicBoolean();
        Thread fallback = new Thread(() -> {
            try {
                Thread.sleep(15000);
                if (made.compareAndSet(false, true))
                    events(end, 1);
            } catch (InterruptedException | SQLException e) {
                // the watch ended first
            }
        });
        fallback.setDaemon(true);
        fallback.start();
        try (Watch watch = Watch.open(ClientsTest.URL, options)) {
            while (watch.hasNext()) {
                Watch.Event event = watch.next();
                if (made.compareAndSet(false, true))
                    events(end, 1);
                rows.add(event.position() + " " + (event.token() == null ? "-" : event.token()));
                replayed.add(event.replayed());
                if (event.name().equals(end + "-1"))
                    break;
            }
        } finally {
            fallback.interrupt();
        }
        return rows;
    }

    static String lastPosition(List<String> rows) {
        return rows.get(rows.size() - 1).split(" ")[0];
    }

    static void testWatchSince() throws Exception {
        String base = ClientsTest.PREFIX + "watch-since";
        events(base, 5);
        String since = ClientsTest.admin("SELECT xid || '/' || ordinal FROM lease.history WHERE name = ?", base + "-2").get(0);
        List<Boolean> replayed = new ArrayList<>();
        List<String> got = until(new Watch.Options().since(since), base + "-end", replayed);
        List<String> want = history("(xid, ordinal) > (SELECT split_part(p, '/', 1)::xid8, split_part(p, '/', 2)::int8 FROM (SELECT ?::text AS p) AS s)",
                since, lastPosition(got));
        ClientsTest.report(got.size() >= 4 && got.equals(want) && replayed.get(0) && !replayed.get(replayed.size() - 1),
                "watch: since a position replays every event after it (replayed), then goes on live, each once, in order",
                got, want, replayed);
        String at = ClientsTest.admin("SELECT to_json(at) #>> '{}' FROM lease.history WHERE name = ?", base + "-3").get(0);
        Instant instant = java.time.OffsetDateTime.parse(at).toInstant();
        got = until(new Watch.Options().since(instant), base + "-time-end", new ArrayList<>());
        want = history("at >= ?::timestamptz", at, lastPosition(got));
        ClientsTest.report(got.size() >= 4 && got.equals(want),
                "watch: since an Instant replays the events recorded from then on, in position order, then goes on live", got, want);
    }

    static void testWatchBadInput() {
        for (String bad : new String[] {"garbage", "12/", "/3", "1/2/3", "-1/2", "1/-2", "03:00", "", "1/9223372036854775808", "18446744073709551616/1"}) {
            String got;
            try {
                new Watch.Options().since(bad);
                got = "accepted";
            } catch (IllegalArgumentException e) {
                got = e.getMessage();
            }
            ClientsTest.report(got.startsWith("pglease: since must be a position XID/N"),
                    "watch: since \"" + bad + "\" throws IllegalArgumentException at once", got);
        }
    }

    /** A server without lease 1.4's events_horizon: an error that connecting again would not mend is thrown from next(). */
    static void testWatchServerError() throws Exception {
        try (Connection c = ClientsTest.connect(); java.sql.Statement s = c.createStatement()) {
            s.execute("CREATE DATABASE watch_no_lease_java");
        }
        try {
            String got;
            try (Watch watch = Watch.open(ClientsTest.URL.replace("/postgres?", "/watch_no_lease_java?"), new Watch.Options())) {
                got = "an event: " + watch.next();
            } catch (IllegalStateException e) {
                got = e.getMessage();
            }
            ClientsTest.report(got.contains("does not exist"), "watch: an error of the server (no lease extension) is thrown from next() (IllegalStateException)", got);
        } finally {
            try (Connection c = ClientsTest.connect(); java.sql.Statement s = c.createStatement()) {
                s.execute("DROP DATABASE watch_no_lease_java");
            }
        }
    }
}
