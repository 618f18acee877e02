-- contended acquire on 16 shared names; the winner releases at once (a second
-- autocommit transaction). A busy name returns NULL, mapped to 0: no release.
\set n random(1, 16)
SELECT coalesce(lease.lease_acquire('hot:' || :n, 'w' || :client_id, '30 seconds'), 0) AS tok \gset
\if :tok > 0
SELECT 1 / lease.lease_release('hot:' || :n, :tok)::int;
\endif
