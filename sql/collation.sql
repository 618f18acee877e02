-- The fence finds a lease row through the primary key of lease.leases, with the
-- column's collation. In a database whose default collation orders names
-- differently from byte order (ICU en-US: "a" < "B" < "c"), any other collation
-- would descend the index the wrong way and miss live leases.
CREATE DATABASE lease_collation TEMPLATE template0
    LOCALE_PROVIDER icu ICU_LOCALE 'en-US' LOCALE 'C.UTF-8';
\c lease_collation
CREATE EXTENSION lease;
SELECT count(lease.lease_acquire(name, 'w', '1 hour')) AS granted
FROM (SELECT CASE WHEN g % 2 = 0 THEN chr(65 + g % 26) ELSE chr(97 + g % 26) END || g AS name
      FROM generate_series(1, 3000) AS g) AS names;
SELECT (SELECT array_agg(name ORDER BY name) FROM lease.leases)
    <> (SELECT array_agg(name ORDER BY name COLLATE "C") FROM lease.leases) AS orders_differ;
SELECT count(*) AS fenced_writes_passed
FROM lease.leases AS l, LATERAL (SELECT lease.fenced_write(l.name, l.token)) AS w;
\c contrib_regression
DROP DATABASE lease_collation;
