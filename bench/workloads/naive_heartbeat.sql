-- naive baseline of lease_heartbeat.sql.
\set tok :hbbase + :client_id
SELECT 1 / naive.heartbeat('hb:' || :client_id, :tok)::int;
