-- Pools: the held count of each claimer (lease.pool_claimers.held, which claim
-- and surplus read instead of counting) equals the number of the pool's
-- resources whose session it is, after every kind of transition
-- (docs/reference.md, "Pools"); and a claim passes over resources it cannot
-- take and fetches more. The races are specs/pool-held-races.spec's.
CREATE EXTENSION lease;

CREATE TEMP TABLE who (label text PRIMARY KEY, id bigint NOT NULL);
CREATE TEMP TABLE tok (name text PRIMARY KEY, token bigint NOT NULL);

-- Every claimer row as "pool label held", with the real count when it differs.
CREATE FUNCTION pg_temp.held() RETURNS text LANGUAGE sql AS $$
SELECT string_agg(format('%s %s %s%s', c.pool, w.label, c.held,
                         CASE WHEN c.held <> r.n THEN format(' (REAL %s)', r.n) ELSE '' END),
                  ', ' ORDER BY c.pool, w.label)
  FROM lease.pool_claimers AS c
  JOIN pg_temp.who AS w ON w.id = c.session
 CROSS JOIN LATERAL (SELECT count(*) AS n FROM lease.pool_resources AS p
                      WHERE p.pool = c.pool AND p.session = c.session) AS r
$$;

-- A claim, its grants' tokens kept for releases.
CREATE FUNCTION pg_temp.claim(pool text, label text, max integer DEFAULT NULL) RETURNS bigint LANGUAGE sql AS $$
WITH c AS (SELECT name, token FROM lease.claim(pool, (SELECT id FROM pg_temp.who WHERE label = $2), max)),
     i AS (INSERT INTO pg_temp.tok SELECT name, token FROM c
           ON CONFLICT (name) DO UPDATE SET token = EXCLUDED.token)
SELECT count(*) FROM c
$$;

SELECT count(lease.pool_put('h', format('h:%s', lpad(g::text, 2, '0')))) FROM generate_series(1, 10) AS g;
SELECT count(lease.pool_put('g', format('g:%s', g))) FROM generate_series(1, 4) AS g;
INSERT INTO who VALUES ('a', lease.session_open('a', '1 hour')), ('b', lease.session_open('b', '1 hour'));

-- claim: a alone takes the whole pool; b's share is 5, but nothing is free.
SELECT pg_temp.claim('h', 'a') AS a_claimed, pg_temp.held();
SELECT pg_temp.claim('h', 'b') AS b_claimed, pg_temp.held();
-- surplus, each released with lease_release: then b takes them.
SELECT count(lease.lease_release(s, (SELECT token FROM tok WHERE name = s))) AS released
  FROM lease.surplus('h', (SELECT id FROM who WHERE label = 'a')) AS s;
SELECT pg_temp.held();
SELECT pg_temp.claim('h', 'b') AS b_claimed, pg_temp.held();

-- A rolled-back claim, and a claim in a rolled-back savepoint, change nothing.
SELECT lease.lease_release('h:10', (SELECT token FROM tok WHERE name = 'h:10')) AS released, pg_temp.held();
BEGIN;
SELECT pg_temp.claim('h', 'b') AS b_claimed, pg_temp.held();
ROLLBACK;
SELECT pg_temp.held();
BEGIN;
SAVEPOINT before_claim;
SELECT pg_temp.claim('h', 'b') AS b_claimed, pg_temp.held();
ROLLBACK TO SAVEPOINT before_claim;
SELECT pg_temp.held();
COMMIT;
SELECT pg_temp.claim('h', 'b') AS b_claimed, pg_temp.held();

-- lease_revoke of a held resource; its holder claims it back.
SELECT lease.lease_revoke('h:01') > 0 AS revoked, pg_temp.held();
SELECT pg_temp.claim('h', 'a') AS a_claimed, pg_temp.held();

-- pool_put replacing a held resource's state changes no holder; pool_remove
-- of a held one and of a free one.
SELECT lease.pool_put('h', 'h:09', '{"v": 2}'), pg_temp.held();
SELECT lease.pool_remove('h', 'h:09') AS removed_held, pg_temp.held();
SELECT lease.pool_put('h', 'h:11'), lease.pool_remove('h', 'h:11') AS removed_free, pg_temp.held();

-- session_close frees b's resources in the pool; c (2 s ttl) claims them,
-- and all of pool g.
SELECT lease.session_close(id) AS closed, pg_temp.held() FROM who WHERE label = 'b';
INSERT INTO who VALUES ('c', lease.session_open('c', '2 seconds'));
SELECT pg_temp.claim('h', 'c') AS c_claimed, pg_temp.claim('g', 'c') AS c_claimed_g, pg_temp.held();

-- c expires: a takes over its resources in h; lease.expire_due reports its
-- grants in g as expired.
SELECT pg_sleep(2.2);
SELECT pg_temp.claim('h', 'a') AS a_claimed, pg_temp.held();
SELECT lease.expire_due() AS expired, pg_temp.held();
-- Another claimer in g takes the freed ones.
INSERT INTO who VALUES ('d', lease.session_open('d', '1 hour'));
SELECT pg_temp.claim('g', 'd') AS d_claimed, pg_temp.held();

-- The last of them close.
SELECT lease.session_close(id) AS closed, pg_temp.held() FROM who WHERE label = 'a';
SELECT lease.session_close(id) AS closed, pg_temp.held() FROM who WHERE label = 'd';

-- A claim passes over what it cannot take (here two resources held by plain
-- leases) and fetches the next ones: it grants its share in one call.
SELECT count(lease.pool_put('q', format('q:%s', g))) FROM generate_series(1, 6) AS g;
SELECT lease.lease_acquire('q:1', 'outsider', '1 hour') > 0 AS q1, lease.lease_acquire('q:2', 'outsider', '1 hour') > 0 AS q2;
INSERT INTO who VALUES ('e', lease.session_open('e', '1 hour'));
SELECT name FROM lease.claim('q', (SELECT id FROM who WHERE label = 'e'), 3) ORDER BY name;
SELECT pg_temp.claim('q', 'e') AS e_claimed_rest, pg_temp.held();

DROP EXTENSION lease;
