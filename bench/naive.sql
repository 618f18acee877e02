-- bench/naive.sql: the reference competitor for the benchmarks, not shipped.
--
-- The same API as the lease extension, written the way a competent user writes
-- it by hand: one table, one sequence, PL/pgSQL functions (their plans are cached
-- per session, so they are the faster of "plain SQL function" and "PL/pgSQL"),
-- INSERT ... ON CONFLICT DO UPDATE ... WHERE for the compare-and-set, a guarded
-- UPDATE for heartbeat and release, and a PL/pgSQL fence that reads the lease
-- row for every written row.
--
-- It keeps the same semantics where they cost something:
--   * acquire grants a free, released or expired lease, or re-grants it to the
--     same owner, with a fresh token from one sequence; NULL when busy;
--   * heartbeat and release only act on the current, unexpired token;
--   * the fence reads the lease row FOR SHARE, so (like the extension's fence
--     lock) no takeover can commit between the check and the writer's commit.
--     That is what a hand-written fence needs to be correct; FOR KEY SHARE
--     would not block the takeover's UPDATE, a plain SELECT would not either.
-- It does not validate arguments, has no name templates, no security definer
-- and no protection against search_path tricks: it is what users write.

CREATE SCHEMA naive;

CREATE SEQUENCE naive.token_seq;

CREATE TABLE naive.leases (
    name        text PRIMARY KEY,
    owner       text,
    token       bigint      NOT NULL,
    ttl         interval    NOT NULL,
    acquired_at timestamptz NOT NULL,
    renewed_at  timestamptz NOT NULL,
    expires_at  timestamptz NOT NULL
);

CREATE FUNCTION naive.acquire(p_name text, p_owner text, p_ttl interval DEFAULT '20 seconds')
RETURNS bigint
LANGUAGE plpgsql AS $$
DECLARE
    v_token bigint;
BEGIN
    INSERT INTO naive.leases AS l (name, owner, token, ttl, acquired_at, renewed_at, expires_at)
    VALUES (p_name, p_owner, nextval('naive.token_seq'), p_ttl,
            clock_timestamp(), clock_timestamp(), clock_timestamp() + p_ttl)
    ON CONFLICT (name) DO UPDATE
       SET owner = excluded.owner,
           token = excluded.token,
           ttl = excluded.ttl,
           acquired_at = excluded.acquired_at,
           renewed_at = excluded.renewed_at,
           expires_at = excluded.expires_at
     WHERE l.expires_at < clock_timestamp()
        OR l.owner IS NULL
        OR l.owner = excluded.owner
    RETURNING l.token INTO v_token;
    RETURN v_token;   -- NULL: someone else holds it
END
$$;

CREATE FUNCTION naive.heartbeat(p_name text, p_token bigint, p_ttl interval DEFAULT NULL)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE naive.leases
       SET renewed_at = clock_timestamp(),
           expires_at = clock_timestamp() + coalesce(p_ttl, ttl)
     WHERE name = p_name
       AND token = p_token
       AND owner IS NOT NULL
       AND expires_at > clock_timestamp();
    RETURN FOUND;
END
$$;

CREATE FUNCTION naive.release(p_name text, p_token bigint)
RETURNS boolean
LANGUAGE plpgsql AS $$
BEGIN
    UPDATE naive.leases
       SET owner = NULL,
           expires_at = clock_timestamp()
     WHERE name = p_name
       AND token = p_token
       AND owner IS NOT NULL
       AND expires_at > clock_timestamp();
    RETURN FOUND;
END
$$;

CREATE FUNCTION naive.fenced_write(p_name text, p_token bigint)
RETURNS void
LANGUAGE plpgsql AS $$
DECLARE
    cur record;
BEGIN
    SELECT token, owner, expires_at INTO cur
      FROM naive.leases
     WHERE name = p_name
       FOR SHARE;
    IF NOT FOUND OR cur.token <> p_token OR cur.owner IS NULL OR cur.expires_at <= clock_timestamp() THEN
        RAISE EXCEPTION 'stale fencing token % for lease "%"', p_token, p_name
            USING ERRCODE = 'LF001';
    END IF;
END
$$;

-- CREATE TRIGGER ... BEFORE INSERT OR UPDATE OR DELETE ON t
--     FOR EACH ROW EXECUTE FUNCTION naive.fence('lease name');
-- The token is NEW.fence_token, or naive.fence_token for DELETE.
CREATE FUNCTION naive.fence()
RETURNS trigger
LANGUAGE plpgsql AS $$
DECLARE
    v_token bigint;
    cur record;
BEGIN
    IF TG_OP = 'DELETE' THEN
        v_token := nullif(current_setting('naive.fence_token', true), '')::bigint;
    ELSE
        v_token := NEW.fence_token;
    END IF;
    SELECT token, owner, expires_at INTO cur
      FROM naive.leases
     WHERE name = TG_ARGV[0]
       FOR SHARE;
    IF NOT FOUND OR v_token IS NULL OR cur.token <> v_token
       OR cur.owner IS NULL OR cur.expires_at <= clock_timestamp() THEN
        RAISE EXCEPTION 'stale fencing token % for lease "%"', v_token, TG_ARGV[0]
            USING ERRCODE = 'LF001';
    END IF;
    IF TG_OP = 'DELETE' THEN
        RETURN OLD;
    END IF;
    RETURN NEW;
END
$$;
