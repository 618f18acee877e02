-- heartbeat of a lease the client holds: 'hb:<client_id>' was acquired in setup
-- with a 1-hour ttl and token :hbbase + client_id (checked there). The token is
-- computed client-side, so the timed transaction is the heartbeat alone.
\set tok :hbbase + :client_id
SELECT 1 / lease.lease_heartbeat('hb:' || :client_id, :tok)::int;
