'use strict';
// Hold a lease of the PostgreSQL extension `lease` from Node.js with pg
// (node-postgres): acquire it on a client of its own, heartbeat it every
// TTL/3, abort `lease.signal` before the server could let the lease expire
// when it can no longer keep it, and fence transactions with the token.
// Tokens are BigInts. The timing model is that of `pg_lease run`; see
// docs/clients.md in the lease repository.

const os = require('os');
const crypto = require('crypto');
const { performance } = require('perf_hooks');
const pg = require('pg');

const MIN_TTL_MS = 100;
const DEFAULT_TTL_MS = 20000;
// The longest release() tries to release the lease.
const MAX_RELEASE_WAIT_MS = 5000;

const ACQUIRE =
  'SELECT lease.lease_acquire($1, $2, $3::pg_catalog.interval, $4::pg_catalog.interval)::pg_catalog.text AS value';
const HEARTBEAT = 'SELECT lease.lease_heartbeat($1, $2::pg_catalog.int8) AS value';
const RELEASE = 'SELECT lease.lease_release($1, $2::pg_catalog.int8) AS value';
// Checks the lease now (LF001 at once for a stale token; no new grant can
// commit until the transaction ends) and gives fence triggers the token for
// the rest of the transaction: INSERT, UPDATE and DELETE alike.
const FENCE = 'SELECT lease.fenced_write($1, $2::pg_catalog.int8), lease.set_fence_token($2::pg_catalog.int8)';
// Semaphore permits and shared grants (lease 1.3): heartbeat, release and the
// fence take their tokens as they take a lease's.
const SEMAPHORE_ACQUIRE =
  'SELECT lease.semaphore_acquire($1, $2, $3::pg_catalog.int4, $4::pg_catalog.interval, $5::pg_catalog.interval)::pg_catalog.text AS value';
const SHARED_ACQUIRE =
  'SELECT lease.lease_acquire_shared($1, $2, $3::pg_catalog.interval, $4::pg_catalog.interval)::pg_catalog.text AS value';
// All or none: the tokens aligned with the names, or NULL holding nothing.
const ACQUIRE_ALL =
  'SELECT lease.lease_acquire_all($1::pg_catalog.text[], $2, $3::pg_catalog.interval, $4::pg_catalog.interval)::pg_catalog.text[] AS value';
// Several names, each with its own token, in the server's order (by bytes):
// every heartbeat (release) runs; true only if every one was.
const PAIRS =
  ' FROM ROWS FROM (pg_catalog.unnest($1::pg_catalog.text[]), pg_catalog.unnest($2::pg_catalog.int8[])) AS u(n, t)';
const HEARTBEAT_ALL = 'SELECT pg_catalog.bool_and(lease.lease_heartbeat(n, t)) AS value' + PAIRS;
const RELEASE_ALL = 'SELECT pg_catalog.bool_and(lease.lease_release(n, t)) AS value' + PAIRS;
// No single token for fence triggers: rows carry their name's token (tokenOf).
const FENCE_ALL = 'SELECT pg_catalog.count(lease.fenced_write(n, t)) AS value' + PAIRS;
const SET_VALUE = 'SELECT lease.lease_set_value($1, $2::pg_catalog.int8, $3::pg_catalog.jsonb) AS value';
const LEADER = 'SELECT owner, token::pg_catalog.text AS token, value, expires_at FROM lease.leader($1)';

/**
 * SQLSTATE LF001: the server rejected a write made under a stale or expired
 * token. The message is the server's, with its DETAIL (which grant, since
 * when); `detail` holds the DETAIL alone and `cause` is pg's DatabaseError.
 */
class FencedError extends Error {
  constructor(dbError) {
    super(dbError.detail ? `${dbError.message}\nDETAIL: ${dbError.detail}` : dbError.message, { cause: dbError });
    this.name = 'FencedError';
    this.code = 'LF001';
    this.detail = dbError.detail;
  }
}

/** Another owner held the lease for the whole `wait`. */
class NotAcquiredError extends Error {
  constructor(name) {
    super(`lease "${name}" not acquired: another owner holds it`);
    this.name = 'NotAcquiredError';
  }
}

/** The lease can no longer be trusted. */
class LeaseLostError extends Error {
  constructor(name, reason) {
    super(`lease "${name}" lost: ${reason}`);
    this.name = 'LeaseLostError';
  }
}

/** Whether err is LF001: a FencedError, or pg's DatabaseError with that code. */
function isFenced(err) {
  return err != null && err.code === 'LF001';
}

function fenced(err) {
  return isFenced(err) && !(err instanceof FencedError) ? new FencedError(err) : err;
}

class CallTimeout extends Error {
  constructor() {
    super('no answer from the server in time');
    this.name = 'CallTimeout';
  }
}

// The helper's messages for bad input, the same in every helper of
// clients/ (docs/clients.md, "Bad input").
const MESSAGES = {
  name: 'pglease: the lease name must not be empty',
  ttl: `pglease: the ttl must be at least ${MIN_TTL_MS} ms`,
  wait: 'pglease: wait must not be negative',
  grace: 'pglease: grace must be between 0 and ttl/2',
  connection: 'pglease: no connection given',
  malformed: 'pglease: malformed connection string: ',
  permits: 'pglease: permits must be between 1 and 10000',
  permitsShared: 'pglease: permits and shared exclude each other',
  names: 'pglease: no lease names given',
  oneName: 'pglease: setValue needs a grant of one name',
};

// libpq keywords (docs: libpq "Parameter Key Words") and what pg.Client calls them.
const LIBPQ_KEYWORDS = {
  host: 'host',
  hostaddr: 'host',
  port: 'port',
  dbname: 'database',
  user: 'user',
  password: 'password',
  application_name: 'application_name',
  fallback_application_name: 'fallback_application_name',
  options: 'options',
  connect_timeout: 'connect_timeout',
  sslmode: 'sslmode',
  keepalives: 'keepalives',
  keepalives_idle: 'keepalives_idle',
  client_encoding: 'client_encoding',
  target_session_attrs: 'target_session_attrs',
};

/**
 * Parses a libpq connection string of keyword = value pairs (values may be
 * single-quoted, with \\' and \\\\ escapes), as psql and psycopg take it, into a
 * pg.Client config. Throws a TypeError for a malformed one.
 */
function parseKeywordValue(text) {
  const config = {};
  let i = 0;
  const space = (c) => c === ' ' || c === '\t' || c === '\n' || c === '\r' || c === '\f' || c === '\v';
  for (;;) {
    while (i < text.length && space(text[i])) i++;
    if (i >= text.length) break;
    let key = '';
    while (i < text.length && text[i] !== '=' && !space(text[i])) key += text[i++];
    while (i < text.length && space(text[i])) i++;
    if (text[i] !== '=') throw new TypeError(`${MESSAGES.malformed}missing "=" after "${key}" in connection info string`);
    i++;
    while (i < text.length && space(text[i])) i++;
    let value = '';
    if (text[i] === "'") {
      i++;
      for (;;) {
        if (i >= text.length) throw new TypeError(`${MESSAGES.malformed}unterminated quoted string`);
        if (text[i] === '\\' && i + 1 < text.length) {
          value += text[i + 1];
          i += 2;
        } else if (text[i] === "'") {
          i++;
          break;
        } else {
          value += text[i++];
        }
      }
    } else {
      while (i < text.length && !space(text[i])) {
        if (text[i] === '\\' && i + 1 < text.length) i++;
        value += text[i++];
      }
    }
    const property = LIBPQ_KEYWORDS[key];
    if (!property) throw new TypeError(`${MESSAGES.malformed}invalid connection option "${key}"`);
    config[property] = value;
  }
  return config;
}

/**
 * What pg.Client takes, made from what the helpers take: a libpq connection
 * string (keyword = value pairs, or a postgresql:// or postgres:// URI), or
 * pg's own config object. Throws a TypeError before any round trip when it is
 * missing or malformed.
 */
function clientConfig(connection) {
  if (connection === null || connection === undefined) throw new TypeError(MESSAGES.connection);
  if (typeof connection === 'object') return connection;
  if (typeof connection !== 'string') throw new TypeError(MESSAGES.connection);
  if (/^postgres(ql)?:\/\//.test(connection)) {
    try {
      new URL(connection); // eslint-disable-line no-new
    } catch (err) {
      throw new TypeError(`${MESSAGES.malformed}${err.message}`);
    }
    return { connectionString: connection };
  }
  const config = parseKeywordValue(connection);
  if (config.port !== undefined) {
    if (!/^[0-9]+$/.test(config.port)) throw new TypeError(`${MESSAGES.malformed}invalid port "${config.port}"`);
    config.port = Number(config.port);
  }
  if (config.connect_timeout !== undefined) {
    config.connectionTimeoutMillis = Number(config.connect_timeout) * 1000;
    delete config.connect_timeout;
  }
  if (config.keepalives !== undefined) {
    config.keepAlive = config.keepalives !== '0';
    delete config.keepalives;
  }
  if (config.keepalives_idle !== undefined) {
    config.keepAliveInitialDelayMillis = Number(config.keepalives_idle) * 1000;
    delete config.keepalives_idle;
  }
  if (config.sslmode !== undefined) {
    const mode = config.sslmode;
    delete config.sslmode;
    if (mode === 'require' || mode === 'prefer' || mode === 'allow') config.ssl = { rejectUnauthorized: false };
    else if (mode === 'verify-ca' || mode === 'verify-full') config.ssl = true;
    else if (mode !== 'disable') throw new TypeError(`${MESSAGES.malformed}invalid sslmode "${mode}"`);
  }
  for (const key of ['fallback_application_name', 'client_encoding', 'target_session_attrs']) delete config[key];
  return config;
}

const clamp = (value, low, high) => Math.max(low, Math.min(high, value));

function checkKind(options) {
  const permits = options.permits ?? null;
  if (permits !== null && !(Number.isInteger(permits) && permits >= 1 && permits <= 10000)) {
    throw new RangeError(MESSAGES.permits);
  }
  if (permits !== null && options.shared) throw new TypeError(MESSAGES.permitsShared);
  return permits;
}

function checkNames(names) {
  if (!Array.isArray(names) || names.length === 0) throw new TypeError(MESSAGES.names);
  for (const name of names) if (typeof name !== 'string' || name === '') throw new TypeError(MESSAGES.name);
  return [...names];
}

// [names, tokens] of [name, token] pairs in the server's order (by UTF-8
// bytes), tokens as text.
function byBytes(pairs) {
  const ordered = [...pairs].sort((a, b) => Buffer.compare(Buffer.from(a[0]), Buffer.from(b[0])));
  return [ordered.map((pair) => pair[0]), ordered.map((pair) => pair[1].toString())];
}

// What a held lease and a session's grant share: one name and token, or
// several (all or none), each name fenced with its own token.
const grantMethods = {
  /** Each name's token (BigInts), in the order the names were given. */
  get tokens() {
    return new Map(this._pairs);
  },

  /** The token of `name`, one of the names held. */
  tokenOf(name) {
    const pair = this._pairs.find((p) => p[0] === name);
    if (!pair) throw new RangeError(`pglease: "${name}" is not one of the names held`);
    return pair[1];
  },

  /**
   * Fences the transaction open on `client` (call it after BEGIN): checks the
   * lease at once (FencedError if the token is stale or the lease expired),
   * holds off any new grant until the transaction ends, and sets
   * lease.fence_token for the rest of the transaction, so fence triggers
   * accept its INSERTs, UPDATEs and DELETEs. Outside a transaction block the
   * token would last one statement: use transaction(). A grant of several
   * names checks each with its own token and sets no lease.fence_token: rows
   * then carry their name's token (tokenOf).
   */
  async fence(client) {
    if (client === null || client === undefined) throw new TypeError(MESSAGES.connection);
    try {
      if (this._pairs.length > 1) await client.query(FENCE_ALL, byBytes(this._pairs));
      else await client.query(FENCE, [this._pairs[0][0], this._pairs[0][1].toString()]);
    } catch (err) {
      throw fenced(err);
    }
  },

  /**
   * Publishes `value` (anything JSON: an address, a role) for this grant
   * (lease.lease_set_value), for leader() and the value_set event: false,
   * and nothing changed, if its token is no longer live. With `client`, in
   * its transaction; without, on the helper's client. One name only.
   */
  async setValue(value, client) {
    if (this._pairs.length !== 1) throw new TypeError(MESSAGES.oneName);
    const values = [this._pairs[0][0], this._pairs[0][1].toString(), JSON.stringify(value)];
    if (client) return (await client.query(SET_VALUE, values)).rows[0].value;
    return this._helperQuery(SET_VALUE, values);
  },
};

function addGrantMethods(cls) {
  for (const key of Object.getOwnPropertyNames(grantMethods)) {
    Object.defineProperty(cls.prototype, key, Object.getOwnPropertyDescriptor(grantMethods, key));
  }
}

/**
 * Who holds `name` now and what each published (lease.leader): an array of
 * { owner, token (BigInt), value, expiresAt (Date) }, one for an exclusive
 * lease, one per holder of a semaphore or shared lease, none when nobody
 * holds it. `db` is a pg.Client or pg.Pool of yours, or a connection string
 * or config for a client of its own.
 */
async function leader(db, name) {
  if (db === null || db === undefined) throw new TypeError(MESSAGES.connection);
  if (typeof name !== 'string' || name === '') throw new TypeError(MESSAGES.name);
  let client = db;
  let own = null;
  if (typeof db.query !== 'function') {
    own = new pg.Client(clientConfig(db));
    own.on('error', () => {});
    await own.connect();
    client = own;
  }
  try {
    const { rows } = await client.query(LEADER, [name]);
    return rows.map((row) => ({ owner: row.owner, token: BigInt(row.token), value: row.value, expiresAt: row.expires_at }));
  } finally {
    if (own) await own.end().catch(() => {});
  }
}

function defaultOwner() {
  return `${os.hostname()}:${process.pid}:${crypto.randomBytes(4).toString('hex')}`;
}

class Lease {
  constructor(connection, name, options = {}) {
    const config = clientConfig(connection);
    options = options ?? {};
    let names = null;
    if (options._names) {
      names = checkNames(options._names);
      name = names.join(', ');
    } else if (typeof name !== 'string' || name === '') throw new TypeError(MESSAGES.name);
    const permits = checkKind(options);
    const ttl = options.ttl ?? DEFAULT_TTL_MS;
    if (!Number.isFinite(ttl) || ttl < MIN_TTL_MS) throw new RangeError(`${MESSAGES.ttl}, not ${ttl}`);
    const wait = options.wait ?? 0;
    if (!Number.isFinite(wait) || wait < 0) throw new RangeError(MESSAGES.wait);
    const grace = options.grace ?? ttl / 5;
    if (!(grace >= 0 && grace <= ttl / 2)) throw new RangeError(MESSAGES.grace);

    this.name = name;
    /** The names held: one, or those of holdAll in their order. */
    this.names = names ?? [name];
    this.permits = permits;
    this.shared = Boolean(options.shared);
    this.owner = options.owner || defaultOwner();
    this.ttl = ttl;
    /** The fencing token of this grant, a BigInt (null for several names: tokenOf). */
    this.token = null;
    this._pairs = [];
    this._clientConfig = config;
    this._wait = wait;
    // Every period counts from when the last successful acquire or heartbeat
    // was sent (docs/cli.md, "How run keeps the command inside the lease"):
    // the server read its clock later than that.
    this._interval = ttl / 3;
    this._trust = ttl - ttl / 10 - grace;
    this._retry = clamp(ttl / 20, 50, 1000);
    this._poll = clamp(ttl / 10, 50, 1000);
    this._lastSuccess = 0;
    this._client = null;
    this._controller = new AbortController();
    this._stopped = false;
    this._wake = null;
    this._keeping = null;
    this._releasing = null;
    this._lostError = null;
  }

  /** Aborted, with a LeaseLostError as its reason, when the lease is lost. */
  get signal() {
    return this._controller.signal;
  }

  get lost() {
    return this._lostError !== null;
  }

  /** Throws the LeaseLostError if the lease has been lost. */
  check() {
    if (this._lostError) throw this._lostError;
  }

  _helperQuery(text, values) {
    if (this._releasing) throw new Error('pglease: the lease has been released');
    return this._call(text, values, performance.now() + this._interval);
  }

  /**
   * Runs `fn(client)` in a transaction fenced with fence(), on `db` (a
   * pg.Client, or a pg.Pool: a client is checked out for it), and commits
   * it; rolls back if fn throws. LF001 from any step throws a FencedError.
   */
  async transaction(db, fn) {
    if (db === null || db === undefined) throw new TypeError(MESSAGES.connection);
    if (typeof fn !== 'function') throw new TypeError('pglease: transaction() needs a function to run');
    const pooled = typeof db.idleCount === 'number';
    const client = pooled ? await db.connect() : db;
    try {
      await client.query('BEGIN');
      try {
        await this.fence(client);
        const result = await fn(client);
        await client.query('COMMIT');
        return result;
      } catch (err) {
        await client.query('ROLLBACK').catch(() => {});
        throw fenced(err);
      }
    } finally {
      // The pool drops a client whose connection broke.
      if (pooled) client.release();
    }
  }

  /**
   * Stops the heartbeats and releases the lease (trying for at most 5 s, and
   * never past the moment it could expire anyway). Resolves true when
   * released, false when the server could not be reached (the lease then
   * expires on its own); rejects with the LeaseLostError if the lease was
   * lost or was no longer held. Calling it again gives the same result.
   */
  release() {
    if (!this._releasing) this._releasing = this._release();
    return this._releasing;
  }

  async _release() {
    this._stopped = true;
    if (this._wake) this._wake();
    await this._keeping;
    try {
      this.check();
      const deadline = Math.min(performance.now() + MAX_RELEASE_WAIT_MS, this._lastSuccess + this.ttl);
      let released;
      try {
        released =
          this._pairs.length > 1
            ? await this._call(RELEASE_ALL, byBytes(this._pairs), deadline)
            : await this._call(RELEASE, [this.name, this.token.toString()], deadline);
      } catch (err) {
        if (err instanceof pg.DatabaseError) throw err;
        return false;
      }
      if (!released) {
        this._lostError = new LeaseLostError(this.name, 'it was no longer held when released');
        throw this._lostError;
      }
      return true;
    } finally {
      this._disconnect();
    }
  }

  async _acquire() {
    const giveUpAt = performance.now() + this._wait;
    const ttl = `${Math.round(this.ttl)} milliseconds`;
    for (;;) {
      const sent = performance.now();
      // The server queues waiters (first come, first served) and wakes the
      // first when the lease frees up. Each call waits at most half the trust
      // window: a grant later than the whole window could not be trusted at
      // all, since the lease's TTL may have started when the call was sent.
      const wait = clamp(giveUpAt - sent, 0, this._trust / 2);
      let token = null;
      try {
        token = await this._call(...this._acquisition(ttl, `${Math.round(wait * 1000)} microseconds`), sent + this._trust);
      } catch (err) {
        if (err instanceof pg.DatabaseError || performance.now() >= giveUpAt) throw err;
      }
      if (token !== null) {
        // int8 arrives as text: never through a Number
        const tokens = Array.isArray(token) ? token.map((t) => BigInt(t)) : [BigInt(token)];
        this._pairs = this.names.map((n, i) => [n, tokens[i]]);
        this.token = tokens.length === 1 ? tokens[0] : null;
        this._lastSuccess = sent;
        return;
      }
      const now = performance.now();
      if (now >= giveUpAt) throw new NotAcquiredError(this.name);
      // Refused early, or failed: do not spin.
      if (now < sent + wait) await new Promise((resolve) => setTimeout(resolve, Math.min(this._poll, giveUpAt - now)));
    }
  }

  // The acquire's statement and parameters.
  _acquisition(ttl, wait) {
    if (this.names.length > 1) return [ACQUIRE_ALL, [this.names, this.owner, ttl, wait]];
    if (this.permits !== null) return [SEMAPHORE_ACQUIRE, [this.name, this.owner, this.permits, ttl, wait]];
    if (this.shared) return [SHARED_ACQUIRE, [this.name, this.owner, ttl, wait]];
    return [ACQUIRE, [this.name, this.owner, ttl, wait]];
  }

  async _keep() {
    let next = this._lastSuccess + this._interval;
    for (;;) {
      const now = performance.now();
      const trustEnds = this._lastSuccess + this._trust;
      if (now >= trustEnds) {
        this._lose(`no heartbeat succeeded for ${Math.round(now - this._lastSuccess)} ms`);
        return;
      }
      if (now < next) {
        await new Promise((resolve) => {
          const timer = setTimeout(resolve, Math.min(next, trustEnds) - now);
          this._wake = () => {
            clearTimeout(timer);
            resolve();
          };
        });
        this._wake = null;
        if (this._stopped) return;
        continue;
      }
      let renewed;
      try {
        renewed = await this._call(...this._renewal(), Math.min(trustEnds, now + this._interval));
      } catch {
        if (this._stopped) return;
        next = performance.now() + this._retry;
        continue;
      }
      if (this._stopped) return;
      if (!renewed) {
        this._lose('the heartbeat was refused (the lease was revoked, expired or taken over)');
        return;
      }
      this._lastSuccess = now;
      next = now + this._interval;
    }
  }

  // The heartbeat's statement and parameters.
  _renewal() {
    if (this._pairs.length > 1) return [HEARTBEAT_ALL, byBytes(this._pairs)];
    return [HEARTBEAT, [this.name, this.token.toString()]];
  }

  _lose(reason) {
    this._lostError = new LeaseLostError(this.name, reason);
    this._controller.abort(this._lostError);
  }

  // One statement on the helper's own client. A call with no answer by
  // `deadline` is abandoned, and with it the client.
  async _call(text, values, deadline) {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new CallTimeout()), Math.max(0, deadline - performance.now()));
    });
    try {
      if (!this._client) {
        const client = new pg.Client(this._clientConfig);
        // A client whose connection breaks while idle emits 'error': without
        // a listener that would crash the process.
        client.on('error', () => {});
        this._client = client;
        await Promise.race([client.connect(), timeout]);
      }
      const result = await Promise.race([this._client.query(text, values), timeout]);
      return result.rows[0].value;
    } catch (err) {
      if (!(err instanceof pg.DatabaseError)) this._disconnect();
      throw err;
    } finally {
      clearTimeout(timer);
    }
  }

  _disconnect() {
    if (this._client) {
      this._client.end().catch(() => {});
      this._client = null;
    }
  }
}

/**
 * Acquires lease `name` and heartbeats it until `lease.release()`.
 * `connection` is a libpq connection string (keyword = value pairs, or a
 * postgresql:// URI) or what `new pg.Client()` takes (a config object), for
 * the helper's own client. Options, in milliseconds:
 * `ttl` (default 20000, at least 100), `wait` (how long to wait in the
 * server's queue while another owner holds the lease; default 0, one try;
 * then NotAcquiredError),
 * `grace` (default ttl/5, at most ttl/2: the time your code has to stop after
 * the loss signal), `owner` (default host:pid:random).
 */
async function hold(connection, name, options) {
  const lease = new Lease(connection, name, options);
  try {
    await lease._acquire();
  } catch (err) {
    lease._disconnect();
    throw err;
  }
  lease._keeping = lease._keep();
  return lease;
}

/**
 * Acquires every lease of `names` or none (lease.lease_acquire_all), waiting
 * up to `wait` (then NotAcquiredError, holding nothing), and heartbeats them
 * all with one statement until `lease.release()`; the loss of any is the loss
 * of the whole. `tokens` and `tokenOf(name)` give each name's token; the
 * fenced transaction checks every name with its own token. Options as for
 * hold() (no `permits` or `shared`).
 */
async function holdAll(connection, names, options) {
  if (!Array.isArray(names) || names.length === 0) throw new TypeError(MESSAGES.names);
  const { permits, shared, ...rest } = options ?? {};
  if (permits != null || shared) throw new TypeError('pglease: holdAll takes no permits or shared');
  return hold(connection, '', { ...rest, _names: names });
}

/** holdAll() while `await fn(lease)` runs, then released, as withLease(). */
async function withAll(connection, names, options, fn) {
  if (typeof fn !== 'function') throw new TypeError('pglease: withAll() needs a function to run');
  return withHeld(await holdAll(connection, names, options), fn);
}

/**
 * Holds the lease while `await fn(lease)` runs, then releases it; returns
 * what fn returned. If fn succeeded but the lease was lost meanwhile, throws
 * the LeaseLostError.
 */
async function withLease(connection, name, options, fn) {
  if (typeof fn !== 'function') throw new TypeError('pglease: withLease() needs a function to run');
  return withHeld(await hold(connection, name, options), fn);
}

async function withHeld(lease, fn) {
  let result;
  try {
    result = await fn(lease);
  } catch (err) {
    await lease.release().catch(() => {});
    throw err;
  }
  await lease.release();
  return result;
}

// -- sessions and pools ------------------------------------------------------

const SESSION_OPEN = 'SELECT lease.session_open($1, $2::pg_catalog.interval, false)::pg_catalog.text AS value';
const SESSION_KEEPALIVE = 'SELECT lease.session_keepalive($1::pg_catalog.int8) AS value';
const SESSION_CLOSE = 'SELECT lease.session_close($1::pg_catalog.int8) AS value';
const SESSION_ACQUIRE =
  'SELECT lease.session_acquire($1::pg_catalog.int8, $2, $3::pg_catalog.interval)::pg_catalog.text AS token';
const CLAIM =
  'SELECT name, token::pg_catalog.text AS token, state FROM lease.claim($1, $2::pg_catalog.int8, $3::pg_catalog.int4)';
const SURPLUS = 'SELECT name FROM lease.surplus($1, $2::pg_catalog.int8) AS name';
const CHECKPOINT = 'SELECT lease.checkpoint($1, $2::pg_catalog.int8, $3::pg_catalog.jsonb) AS value';
const RELEASE_ONE = 'SELECT lease.lease_release($1, $2::pg_catalog.int8) AS value';
const SESSION_SEMAPHORE_ACQUIRE =
  'SELECT lease.session_semaphore_acquire($1::pg_catalog.int8, $2, $3::pg_catalog.int4, $4::pg_catalog.interval)::pg_catalog.text AS token';
const SESSION_SHARED_ACQUIRE =
  'SELECT lease.session_acquire_shared($1::pg_catalog.int8, $2, $3::pg_catalog.interval)::pg_catalog.text AS token';
const SESSION_ACQUIRE_ALL =
  'SELECT lease.session_acquire_all($1::pg_catalog.int8, $2::pg_catalog.text[], $3::pg_catalog.interval)::pg_catalog.text[] AS token';

/**
 * A session of the lease extension (docs/concepts.md, "Sessions"): one
 * keepalive, every TTL/3, for every lease acquired or claimed under it, with
 * the loss signal of a Lease (`signal`, `lost`, `check()`). `acquire`,
 * `claim`, `surplus` and the leases' `release` and `checkpoint` run on a
 * second client of the helper's, so a waiting acquire never delays a
 * keepalive. Not bound to its connection: it works through PgBouncer in
 * transaction mode.
 */
class Session extends Lease {
  constructor(connection, options = {}) {
    super(connection, 'session', { ...(options ?? {}), wait: 0 });
    this._ops = null;
  }

  /** The session's id, a BigInt. */
  get id() {
    return this.token;
  }

  /** Throws the LeaseLostError if the session has been lost. */
  check() {
    if (this._lostError) throw this._lostError;
  }

  /** Acquires lease `name` under the session, waiting up to `wait` ms in the server's queue; then NotAcquiredError. */
  async acquire(name, options = {}) {
    if (typeof name !== 'string' || name === '') throw new TypeError(MESSAGES.name);
    options = options ?? {};
    const permits = checkKind(options);
    const wait = options.wait ?? 0;
    if (!Number.isFinite(wait) || wait < 0) throw new RangeError(MESSAGES.wait);
    const waitText = `${Math.round(wait * 1000)} microseconds`;
    const [row] =
      permits !== null
        ? await this._query(SESSION_SEMAPHORE_ACQUIRE, [this.id.toString(), name, permits, waitText])
        : options.shared
          ? await this._query(SESSION_SHARED_ACQUIRE, [this.id.toString(), name, waitText])
          : await this._query(SESSION_ACQUIRE, [this.id.toString(), name, waitText]);
    if (row.token === null) throw new NotAcquiredError(name);
    return new SessionLease(this, name, BigInt(row.token), null);
  }

  /**
   * Acquires every lease of `names` under the session, or none
   * (lease.session_acquire_all), waiting up to `wait` ms; then
   * NotAcquiredError. One SessionLease with a token per name (tokens, tokenOf).
   */
  async acquireAll(names, options = {}) {
    names = checkNames(names);
    const wait = (options ?? {}).wait ?? 0;
    if (!Number.isFinite(wait) || wait < 0) throw new RangeError(MESSAGES.wait);
    const [row] = await this._query(SESSION_ACQUIRE_ALL, [this.id.toString(), names, `${Math.round(wait * 1000)} microseconds`]);
    if (row.token === null) throw new NotAcquiredError(names.join(', '));
    return new SessionLease(this, names.join(', '), null, null, names.map((n, i) => [n, BigInt(row.token[i])]));
  }

  /** The new grants of the session's fair share of `pool` (at most `max`), each with the state last checkpointed. */
  async claim(pool, options = {}) {
    if (typeof pool !== 'string' || pool === '') throw new TypeError('pglease: the pool name must not be empty');
    const max = (options ?? {}).max ?? null;
    const rows = await this._query(CLAIM, [pool, this.id.toString(), max]);
    return rows.map((row) => new SessionLease(this, row.name, BigInt(row.token), row.state));
  }

  /** The names this session holds in `pool` beyond its fair share, for it to release. */
  async surplus(pool) {
    if (typeof pool !== 'string' || pool === '') throw new TypeError('pglease: the pool name must not be empty');
    return (await this._query(SURPLUS, [pool, this.id.toString()])).map((row) => row.name);
  }

  /** Closes the session, releasing every lease it still holds: as release(). */
  close() {
    return this.release();
  }

  async _query(text, values) {
    this.check();
    if (!this._ops) {
      const client = new pg.Client(this._clientConfig);
      client.on('error', () => {});
      this._ops = client.connect().then(() => client);
      this._ops.catch(() => {
        this._ops = null;
      });
    }
    const client = await this._ops;
    try {
      return (await client.query(text, values)).rows;
    } catch (err) {
      if (err.code === 'LF003') throw new LeaseLostError(`session ${this.token}`, `${err.message}`);
      if (!(err instanceof pg.DatabaseError)) {
        this._ops = null;
        client.end().catch(() => {});
      }
      throw fenced(err);
    }
  }

  async _acquire() {
    const sent = performance.now();
    const value = await this._call(SESSION_OPEN, [this.owner, `${Math.round(this.ttl)} milliseconds`], sent + this._trust);
    this.token = BigInt(value);
    this._lastSuccess = sent;
  }

  _renewal() {
    return [SESSION_KEEPALIVE, [this.token.toString()]];
  }

  _lose(reason) {
    this._lostError = new LeaseLostError(`session ${this.token}`, reason);
    this._controller.abort(this._lostError);
  }

  async _release() {
    this._stopped = true;
    if (this._wake) this._wake();
    await this._keeping;
    try {
      this.check();
      const deadline = Math.min(performance.now() + MAX_RELEASE_WAIT_MS, this._lastSuccess + this.ttl);
      try {
        await this._call(SESSION_CLOSE, [this.token.toString()], deadline);
      } catch (err) {
        if (err instanceof pg.DatabaseError) throw err;
        return false;
      }
      return true;
    } finally {
      this._disconnect();
      if (this._ops) {
        const ops = this._ops;
        this._ops = null;
        ops.then((client) => client.end()).catch(() => {});
      }
    }
  }
}

/** A lease held under a Session: live while the session is. */
class SessionLease {
  constructor(session, name, token, state, pairs) {
    this.session = session;
    this.name = name;
    this._pairs = pairs ?? [[name, token]];
    /** The names held: one, or those of acquireAll in their order. */
    this.names = this._pairs.map((pair) => pair[0]);
    /** The fencing token of this grant, a BigInt (null for several names: tokenOf). */
    this.token = token;
    /** What the pool resource's last holder checkpointed (null for Session.acquire). */
    this.state = state;
  }

  get signal() {
    return this.session.signal;
  }

  get lost() {
    return this.session.lost;
  }

  check() {
    this.session.check();
  }

  /**
   * Stores `state` (anything JSON) as the resource's progress under this
   * grant's token: false, and nothing changed, if the token is stale. With
   * `client`, in its open transaction (atomic with your writes there).
   */
  async checkpoint(state, client) {
    const values = [this.name, this.token.toString(), JSON.stringify(state)];
    if (client) return (await client.query(CHECKPOINT, values)).rows[0].value;
    return (await this.session._query(CHECKPOINT, values))[0].value;
  }

  _helperQuery(text, values) {
    return this.session._query(text, values).then((rows) => rows[0].value);
  }

  /** Releases this lease now (the session keeps its others). */
  async release() {
    if (this._pairs.length > 1) return (await this.session._query(RELEASE_ALL, byBytes(this._pairs)))[0].value;
    return (await this.session._query(RELEASE_ONE, [this.name, this.token.toString()]))[0].value;
  }
}
addGrantMethods(Lease);
addGrantMethods(SessionLease);
SessionLease.prototype.transaction = Lease.prototype.transaction;

/**
 * Opens a session and keeps it alive until `session.close()`. `connection`
 * as for hold(); options `ttl`, `grace`, `owner` as for hold().
 */
async function session(connection, options) {
  const opened = new Session(connection, options);
  try {
    await opened._acquire();
  } catch (err) {
    opened._disconnect();
    throw err;
  }
  opened._keeping = opened._keep();
  return opened;
}

/**
 * Holds a session while `await fn(session)` runs, then closes it (releasing
 * every lease it still holds); if fn succeeded but the session was lost
 * meanwhile, throws the LeaseLostError.
 */
async function withSession(connection, options, fn) {
  if (typeof fn !== 'function') throw new TypeError('pglease: withSession() needs a function to run');
  const opened = await session(connection, options);
  let result;
  try {
    result = await fn(opened);
  } catch (err) {
    await opened.close().catch(() => {});
    throw err;
  }
  await opened.close();
  return result;
}

// Watching events (docs/reference.md, "Resuming a watch"): every event has a
// position (xid, ordinal) in lease.history; the horizon says up to which
// transaction every event has arrived.
const LISTEN = 'SELECT lease.listen_events()';
const HORIZON = 'SELECT lease.events_horizon($1::pg_catalog.bool)::pg_catalog.text AS value';
// From a position, or (with a time and no position yet) from a time on.
const EVENTS_AFTER =
  'SELECT xid::pg_catalog.text, ordinal::pg_catalog.text, event, name, token::pg_catalog.text, owner, ' +
  'session::pg_catalog.text FROM lease.history ' +
  'WHERE CASE WHEN $1::pg_catalog.timestamptz IS NULL ' +
  '           THEN (xid, ordinal) > ($2::pg_catalog.xid8, $3::pg_catalog.int8) ' +
  '           ELSE at >= $1::pg_catalog.timestamptz END ' +
  'ORDER BY history.xid, history.ordinal';
// While events wait for their horizon, how often to ask for it; while nothing
// happens, how often to ask anyway (a partitioned connection shows itself by
// not answering), and how long an answer may take: Node.js cannot set
// TCP_USER_TIMEOUT, so a call without an answer by then breaks the
// connection (all but the first horizon, which waits for transactions).
const HORIZON_INTERVAL_MS = 50;
const PROBE_INTERVAL_MS = 5000;
const ANSWER_TIMEOUT_MS = 10000;
const BAD_SINCE = 'pglease: since must be a position XID/N (an event\'s position) or a Date';
const MAX_ORDINAL = 2n ** 63n;

/**
 * A lease event (docs/concepts.md, "Events and history"). `position` is
 * "XID/N", to resume from; `value` is what an `acquired` or `value_set`
 * event published (not kept in history: null when replayed). Tokens and
 * session IDs are BigInts.
 */
class Event {
  constructor(fields, replayed) {
    this.event = fields.event;
    this.name = fields.name ?? null;
    this.token = fields.token == null ? null : BigInt(fields.token);
    this.owner = fields.owner ?? null;
    this.session = fields.session == null ? null : BigInt(fields.session);
    this.position = fields.position ?? null;
    this.value = fields.value === undefined ? null : fields.value;
    this.replayed = replayed;
  }
}

// A position as [xid, ordinal] (BigInts), or null for anything else.
function positionKey(text) {
  const match = typeof text === 'string' ? /^([0-9]+)\/([0-9]+)$/.exec(text) : null;
  if (!match || BigInt(match[2]) >= MAX_ORDINAL) return null;
  return [BigInt(match[1]), BigInt(match[2])];
}

const before = (a, b) => a[0] < b[0] || (a[0] === b[0] && a[1] < b[1]);

// The notification's JSON with the numbers of its top-level "token" and
// "session" as strings: they are bigints, which JSON.parse would round past
// 2^53 (the published "value" keeps its numbers).
function exactIds(text) {
  let out = '';
  let depth = 0;
  let last = null;
  let key = null;
  for (let i = 0; i < text.length; i++) {
    const c = text[i];
    if (c === '"') {
      let j = i + 1;
      while (text[j] !== '"') j += text[j] === '\\' ? 2 : 1;
      last = text.slice(i + 1, j);
      out += text.slice(i, j + 1);
      i = j;
    } else if (c === '{' || c === '[') {
      depth++;
      out += c;
    } else if (c === '}' || c === ']') {
      depth--;
      out += c;
    } else if (depth === 1 && c === ':') {
      key = last;
      out += c;
    } else if (depth === 1 && c === ',') {
      key = null;
      out += c;
    } else if (depth === 1 && (key === 'token' || key === 'session') && /[-0-9]/.test(c)) {
      let j = i;
      while (j < text.length && /[-+0-9.eE]/.test(text[j])) j++;
      out += `"${text.slice(i, j)}"`;
      i = j - 1;
    } else {
      out += c;
    }
  }
  return out;
}

/**
 * Every lease event, in the order of their positions, each once, for as long
 * as the caller iterates (`for await (const event of watch(...))`; leaving
 * the loop closes the connection). A lost or silent connection is replaced,
 * and what happened meanwhile is replayed from lease.history; each loss is
 * logged with console.warn. Options: `since`, a position ("7421/3", the
 * `position` of an event seen earlier: resume after it) or a Date (the events
 * recorded from then on), by default the transactions in progress when it
 * connects; `reconnectInterval` (ms, default 1000). Needs lease 1.4 and
 * lease.record_history (events without a position come as they arrive). A bad
 * `since` throws a TypeError at once.
 */
function watch(connection, options = {}) {
  const config = { ...clientConfig(connection) };
  options = options ?? {};
  const state = { resume: null, sinceTime: null };
  const since = options.since ?? null;
  if (since instanceof Date) {
    if (Number.isNaN(since.getTime())) throw new TypeError(BAD_SINCE);
    state.sinceTime = since;
  } else if (since !== null) {
    state.resume = positionKey(since);
    if (state.resume === null) throw new TypeError(BAD_SINCE);
  }
  const retry = options.reconnectInterval ?? 1000;
  if (!Number.isFinite(retry) || retry < 0) throw new RangeError('pglease: reconnectInterval must not be negative');
  // Keepalives: a peer that vanished while the connection was idle is found.
  if (config.keepAlive === undefined) config.keepAlive = true;
  return watchEvents(config, state, retry);
}

async function* watchEvents(config, state, retry) {
  for (;;) {
    const client = new pg.Client(config);
    try {
      yield* watchClient(client, state);
    } catch (err) {
      // The server's answer to a statement (a lease older than 1.4, say) is
      // no lost connection: it would come again.
      if (err instanceof pg.DatabaseError && err.severity !== 'FATAL' && !String(err.code).startsWith('08')) throw err;
      console.warn(`pglease: watch: connection lost (${err.message}); reconnecting`);
    } finally {
      client.end().catch(() => {});
      client.connection.stream.destroy();
    }
    await new Promise((resolve) => setTimeout(resolve, retry));
  }
}

async function* watchClient(client, state) {
  const received = [];
  let broken = null;
  let wake = null;
  const woken = () => {
    if (wake) wake();
  };
  client.on('notification', (n) => {
    received.push(n);
    woken();
  });
  // A client whose connection breaks while idle emits 'error': without a
  // listener that would crash the process.
  client.on('error', (err) => {
    broken = err;
    woken();
  });
  client.on('end', () => {
    broken = broken ?? new Error('the connection ended');
    woken();
  });
  const answered = async (promise) => {
    let timer;
    const timeout = new Promise((_, reject) => {
      timer = setTimeout(() => reject(new CallTimeout()), ANSWER_TIMEOUT_MS);
    });
    try {
      return await Promise.race([promise, timeout]);
    } finally {
      clearTimeout(timer);
    }
  };
  const pending = new Map();
  const pend = (key, event) => {
    if (state.resume !== null && !before(state.resume, key)) return; // shown already
    const id = `${key[0]}/${key[1]}`;
    if (!pending.has(id)) pending.set(id, { key, event });
  };

  await answered(client.connect());
  await answered(client.query(LISTEN));
  // Writers that looked for a watcher before this one listened sent nothing:
  // wait for them, so that the replay has their events.
  const horizon = BigInt((await client.query(HORIZON, [true])).rows[0].value);
  if (state.resume === null && state.sinceTime === null) state.resume = [horizon, 0n];
  const after = state.resume ?? [0n, 0n];
  const since = state.resume !== null ? null : state.sinceTime;
  const replay = await answered(client.query(EVENTS_AFTER, [since, after[0].toString(), after[1].toString()]));
  for (const row of replay.rows) {
    const position = `${row.xid}/${row.ordinal}`;
    pend(positionKey(position), new Event({ ...row, position }, true));
  }
  let requested = true;
  let lastCall = performance.now();
  const channel = `lease_horizon_${client.processID}`;
  for (;;) {
    for (const n of received.splice(0)) {
      if (n.channel === channel) {
        requested = false;
        const passed = [BigInt(n.payload), 0n];
        const shown = [...pending.values()].filter((p) => before(p.key, passed));
        shown.sort((a, b) => (before(a.key, b.key) ? -1 : 1));
        for (const p of shown) {
          pending.delete(`${p.key[0]}/${p.key[1]}`);
          yield p.event;
        }
        if (state.resume === null || before(state.resume, passed)) state.resume = passed;
        continue;
      }
      const event = new Event(JSON.parse(exactIds(n.payload)), false);
      const key = positionKey(event.position);
      if (key === null) yield event; // not recorded in history: as it comes
      else pend(key, event);
    }
    if (broken) throw broken;
    const interval = pending.size > 0 && !requested ? HORIZON_INTERVAL_MS : PROBE_INTERVAL_MS;
    const wait = lastCall + interval - performance.now();
    if (wait > 0) {
      let timer;
      await new Promise((resolve) => {
        wake = resolve;
        timer = setTimeout(resolve, wait);
      });
      wake = null;
      clearTimeout(timer);
      if (received.length > 0 || broken) continue;
      if (lastCall + interval > performance.now()) continue;
    }
    await answered(client.query(HORIZON, [false]));
    requested = true;
    lastCall = performance.now();
  }
}

module.exports = {
  hold,
  withLease,
  holdAll,
  withAll,
  leader,
  session,
  withSession,
  watch,
  Event,
  Lease,
  Session,
  SessionLease,
  FencedError,
  NotAcquiredError,
  LeaseLostError,
  isFenced,
  clientConfig,
};
