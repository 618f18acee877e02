-- keepalive of one of the 100 sessions (ids :first..:last) that hold the
-- database's session leases (bench/pools_keepalive.sql): one row update
-- however many leases the session holds.
\set s random(:first, :last)
SELECT 1 / lease.session_keepalive(:s)::int;
