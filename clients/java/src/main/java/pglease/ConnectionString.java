package pglease;

import java.net.URI;
import java.net.URISyntaxException;
import java.net.URLDecoder;
import java.nio.charset.StandardCharsets;
import java.sql.DriverManager;
import java.util.Map;
import java.util.Properties;
import java.util.TreeMap;

/**
 * A libpq connection string (keyword = value pairs, or a {@code postgresql://} URI), or a
 * {@code jdbc:postgresql:} URL, turned into what pgjdbc takes: a JDBC URL and properties.
 */
final class ConnectionString {
    static final String MALFORMED = "pglease: malformed connection string: ";

    final String url;
    final Properties properties = new Properties();

    private ConnectionString(String url) {
        this.url = url;
    }

    ConnectionFactory factory() {
        return () -> DriverManager.getConnection(url, properties);
    }

    static ConnectionString parse(String text) {
        if (text == null)
            throw new NullPointerException(Lease.NO_CONNECTION);
        if (text.startsWith("jdbc:"))
            return new ConnectionString(text);
        Map<String, String> keywords = text.startsWith("postgresql://") || text.startsWith("postgres://")
                ? uri(text) : keywordValue(text);
        String host = keywords.getOrDefault("host", "localhost");
        if (host.startsWith("/"))
            throw new IllegalArgumentException(MALFORMED + "pgjdbc cannot connect to a Unix-domain socket (host=" + host + ")");
        if (keywords.containsKey("hostaddr"))
            host = keywords.get("hostaddr");
        if (host.contains(":") && !host.startsWith("["))
            host = "[" + host + "]";
        String port = keywords.getOrDefault("port", "5432");
        if (!port.matches("[0-9]+"))
            throw new IllegalArgumentException(MALFORMED + "invalid port \"" + port + "\"");
        String dbname = keywords.getOrDefault("dbname", keywords.get("user"));
        ConnectionString result = new ConnectionString(
                "jdbc:postgresql://" + host + ":" + port + "/" + (dbname == null ? "" : encode(dbname)));
        for (Map.Entry<String, String> entry : keywords.entrySet()) {
            String property = PROPERTIES.get(entry.getKey());
            if (property == null)
                throw new IllegalArgumentException(MALFORMED + "invalid connection option \"" + entry.getKey() + "\"");
            if (!property.isEmpty())
                result.properties.setProperty(property, entry.getValue());
        }
        return result;
    }

    // libpq keywords and the pgjdbc property each becomes ("" when it is in the URL).
    private static final Map<String, String> PROPERTIES = new TreeMap<>();
    static {
        PROPERTIES.put("host", "");
        PROPERTIES.put("hostaddr", "");
        PROPERTIES.put("port", "");
        PROPERTIES.put("dbname", "");
        PROPERTIES.put("user", "user");
        PROPERTIES.put("password", "password");
        PROPERTIES.put("application_name", "ApplicationName");
        PROPERTIES.put("options", "options");
        PROPERTIES.put("sslmode", "sslmode");
        PROPERTIES.put("sslcert", "sslcert");
        PROPERTIES.put("sslkey", "sslkey");
        PROPERTIES.put("sslrootcert", "sslrootcert");
        PROPERTIES.put("connect_timeout", "connectTimeout");
        PROPERTIES.put("target_session_attrs", "targetServerType");
    }

    /** keyword = value pairs, values bare or single-quoted, with backslash escapes (libpq's rules). */
    private static Map<String, String> keywordValue(String text) {
        Map<String, String> result = new TreeMap<>();
        int i = 0;
        int n = text.length();
        while (true) {
            while (i < n && Character.isWhitespace(text.charAt(i)))
                i++;
            if (i >= n)
                return result;
            StringBuilder key = new StringBuilder();
            while (i < n && text.charAt(i) != '=' && !Character.isWhitespace(text.charAt(i)))
                key.append(text.charAt(i++));
            while (i < n && Character.isWhitespace(text.charAt(i)))
                i++;
            if (i >= n || text.charAt(i) != '=')
                throw new IllegalArgumentException(MALFORMED + "missing \"=\" after \"" + key + "\" in connection info string");
            i++;
            while (i < n && Character.isWhitespace(text.charAt(i)))
                i++;
            StringBuilder value = new StringBuilder();
            if (i < n && text.charAt(i) == '\'') {
                i++;
                while (true) {
                    if (i >= n)
                        throw new IllegalArgumentException(MALFORMED + "unterminated quoted string in connection info string");
                    char c = text.charAt(i);
                    if (c == '\\' && i + 1 < n) {
                        value.append(text.charAt(i + 1));
                        i += 2;
                    } else if (c == '\'') {
                        i++;
                        break;
                    } else {
                        value.append(c);
                        i++;
                    }
                }
            } else {
                while (i < n && !Character.isWhitespace(text.charAt(i))) {
                    if (text.charAt(i) == '\\' && i + 1 < n)
                        i++;
                    value.append(text.charAt(i++));
                }
            }
            result.put(key.toString(), value.toString());
        }
    }

    private static Map<String, String> uri(String text) {
        URI uri;
        try {
            uri = new URI(text);
        } catch (URISyntaxException e) {
            throw new IllegalArgumentException(MALFORMED + e.getMessage());
        }
        Map<String, String> result = new TreeMap<>();
        if (uri.getHost() != null)
            result.put("host", uri.getHost());
        else if (uri.getRawAuthority() != null && !uri.getRawAuthority().isEmpty() && !uri.getRawAuthority().endsWith("@"))
            throw new IllegalArgumentException(MALFORMED + "cannot parse the host of \"" + text + "\"");
        if (uri.getPort() != -1)
            result.put("port", Integer.toString(uri.getPort()));
        String userInfo = uri.getRawUserInfo();
        if (userInfo != null) {
            int colon = userInfo.indexOf(':');
            result.put("user", decode(colon < 0 ? userInfo : userInfo.substring(0, colon)));
            if (colon >= 0)
                result.put("password", decode(userInfo.substring(colon + 1)));
        }
        String path = uri.getRawPath();
        if (path != null && path.length() > 1)
            result.put("dbname", decode(path.substring(1)));
        String query = uri.getRawQuery();
        if (query != null)
            for (String pair : query.split("&")) {
                int eq = pair.indexOf('=');
                if (eq < 0)
                    throw new IllegalArgumentException(MALFORMED + "missing \"=\" in URI query parameter \"" + pair + "\"");
                result.put(decode(pair.substring(0, eq)), decode(pair.substring(eq + 1)));
            }
        return result;
    }

    private static String decode(String text) {
        return URLDecoder.decode(text.replace("+", "%2B"), StandardCharsets.UTF_8);
    }

    private static String encode(String text) {
        return java.net.URLEncoder.encode(text, StandardCharsets.UTF_8).replace("+", "%20");
    }
}
