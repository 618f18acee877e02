'use strict';
// Tests of the Node helper (clients/node) against a real cluster; run by
// test/clients/run.sh, which sets the environment (CLIENTS_CONNINFO, a URL
// here; CLIENTS_ADMIN; CLIENTS_PREFIX; CLIENTS_SERVER_STOP/START: see
// python_test.py). Prints "ok - ..." / "not ok - ..." lines and "# end".

const { execSync, spawn } = require('child_process');
const readline = require('readline');
const pg = require('pg');
const pglease = require('pglease');

const CONN = process.env.CLIENTS_CONNINFO;
const PREFIX = process.env.CLIENTS_PREFIX;
const TWO_53 = 2n ** 53n;
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, ms));

function report(ok, description, ...diagnostic) {
  console.log(`${ok ? 'ok' : 'not ok'} - ${description}`);
  if (!ok && diagnostic.length) {
    for (const line of diagnostic.map((d) => (d instanceof Error ? d.stack : JSON.stringify(d, (k, v) => (typeof v === 'bigint' ? `${v}n` : v)))).join(' ').split('\n')) {
      console.log(`#   ${line}`);
    }
  }
}

async function admin(text, values = []) {
  const client = new pg.Client(pglease.clientConfig(CONN));
  await client.connect();
  try {
    return (await client.query(text, values)).rows[0];
  } finally {
    await client.end();
  }
}

const leaseRow = (name) =>
  admin('SELECT owner, token::text, state, extract(epoch FROM expires_at)::float8 AS expires FROM lease.status WHERE name = $1', [name]);

async function testAcquireReleaseBigint() {
  const name = `${PREFIX}acquire`;
  let lease = await pglease.hold(CONN, name, { owner: 'node-a', ttl: 5000 });
  let row = await leaseRow(name);
  report(
    typeof lease.token === 'bigint' && lease.token > TWO_53 && lease.token === BigInt(row.token) && row.state === 'held' && row.owner === 'node-a',
    `acquire: token ${lease.token} is a BigInt (> 2^53), the server's exactly; lease held by the owner`,
    row,
  );
  const first = lease.token;
  const released = await lease.release();
  row = await leaseRow(name);
  report(released === true && row.state === 'free', 'release() releases the lease', released, row);

  lease = await pglease.hold(CONN, name, { owner: 'node-a', ttl: 5000 });
  row = await leaseRow(name);
  const odd = first % 2n === 1n ? first : lease.token;
  report(
    lease.token === first + 1n && lease.token.toString() === row.token && BigInt(Number(odd)) !== odd,
    `bigint tokens round-trip exactly: ${first}, ${lease.token} (Number() would round ${odd} to ${Number(odd)})`,
    row,
  );
  await lease.release();
}

async function testNotAcquired() {
  const name = `${PREFIX}busy`;
  const first = await pglease.hold(CONN, name, { owner: 'node-first', ttl: 5000 });
  try {
    try {
      await pglease.hold(CONN, name, { owner: 'node-second' });
      report(false, 'a held lease is not acquired (wait 0)');
    } catch (err) {
      report(err instanceof pglease.NotAcquiredError, 'a held lease is not acquired: NotAcquiredError (wait 0)', err);
    }
    const started = performance.now();
    try {
      await pglease.hold(CONN, name, { owner: 'node-second', wait: 400 });
      report(false, 'NotAcquiredError after wait');
    } catch (err) {
      const waited = performance.now() - started;
      report(err instanceof pglease.NotAcquiredError && waited >= 400 && waited < 1500, `NotAcquiredError after wait 400 ms (took ${Math.round(waited)} ms)`, err);
    }
  } finally {
    await first.release();
  }
}

// A waiter is woken by the release: the server queues it (no polling every
// TTL/10, 1 s here).
async function testWaiterWoken() {
  const name = `${PREFIX}wait`;
  const first = await pglease.hold(CONN, name, { owner: 'node-first', ttl: 10000 });
  let releasing = null;
  const releaser = sleep(500).then(() => {
    releasing = performance.now();
    return first.release();
  });
  const second = await pglease.hold(CONN, name, { owner: 'node-second', ttl: 10000, wait: 3000 });
  const took = performance.now() - releasing;
  await releaser;
  await second.release();
  report(second.token > first.token && took < 300,
    `a waiter gets the lease ${Math.round(took)} ms after the holder starts releasing it (wait 3 s, TTL 10 s)`);
}

async function testErrors() {
  try {
    await pglease.hold(CONN, 'node-bad', { ttl: 50 });
    report(false, 'a ttl under 100 ms is refused');
  } catch (err) {
    report(err instanceof RangeError, 'a ttl under 100 ms is refused: RangeError', err);
  }
  try {
    await pglease.hold(CONN, 'node-bad', { ttl: 1000, grace: 600 });
    report(false, 'a grace over ttl/2 is refused');
  } catch (err) {
    report(err instanceof RangeError, 'a grace over ttl/2 is refused: RangeError', err);
  }
  const unreachable = new URL(CONN);
  unreachable.port = '1';
  try {
    await pglease.hold(unreachable.toString(), 'node-unreachable');
    report(false, 'an unreachable server: the connection error');
  } catch (err) {
    report(err.code === 'ECONNREFUSED', 'an unreachable server: the connection error', err);
  }
}

// The same bad input gets the same message from every helper
// (docs/clients.md, "Bad input"), before any round trip: the server here is
// unreachable, so a round trip would fail with ECONNREFUSED instead.
async function testBadInput() {
  const unreachable = new URL(CONN);
  unreachable.port = '1';
  const down = unreachable.toString();
  const cases = [
    ['an empty name', () => pglease.hold(down, ''), TypeError, 'pglease: the lease name must not be empty'],
    ['a zero ttl', () => pglease.hold(down, 'node-bad', { ttl: 0 }), RangeError, 'pglease: the ttl must be at least 100 ms, not 0'],
    ['a negative ttl', () => pglease.hold(down, 'node-bad', { ttl: -1000 }), RangeError, 'pglease: the ttl must be at least 100 ms, not -1000'],
    ['a negative wait', () => pglease.hold(down, 'node-bad', { wait: -1 }), RangeError, 'pglease: wait must not be negative'],
    ['no connection (null)', () => pglease.hold(null, 'node-bad'), TypeError, 'pglease: no connection given'],
    ['no connection (undefined)', () => pglease.withLease(undefined, 'node-bad', {}, async () => {}), TypeError, 'pglease: no connection given'],
    ['a malformed key=value string', () => pglease.hold('host=/tmp port=1 dbname', 'node-bad'), TypeError,
      'pglease: malformed connection string: missing "=" after "dbname" in connection info string'],
    ['an unknown keyword', () => pglease.hold('host=/tmp port=1 colour=blue', 'node-bad'), TypeError,
      'pglease: malformed connection string: invalid connection option "colour"'],
    ['a malformed URI', () => pglease.hold('postgresql://[::1', 'node-bad'), TypeError, 'pglease: malformed connection string: Invalid URL'],
  ];
  for (const [what, call, type, message] of cases) {
    try {
      await call();
      report(false, `bad input, ${what}: "${message}"`);
    } catch (err) {
      report(err instanceof type && err.message === message, `bad input, ${what}: ${type.name} "${message}" before any round trip`, err);
    }
  }
  const lease = await pglease.hold(CONN, `${PREFIX}bad-input`, { ttl: 5000 });
  try {
    for (const [what, call] of [
      ['transaction(null)', () => lease.transaction(null, async () => {})],
      ['fence(undefined)', () => lease.fence(undefined)],
    ]) {
      try {
        await call();
        report(false, `bad input, ${what}: "pglease: no connection given"`);
      } catch (err) {
        report(err instanceof TypeError && err.message === 'pglease: no connection given', `bad input, ${what}: TypeError "pglease: no connection given"`, err);
      }
    }
  } finally {
    await lease.release();
  }
}

// A libpq keyword = value string (the one psql, psycopg and pgx take) for
// the helper's own client, and through clientConfig() for the application's.
async function testKeywordValue() {
  const conninfo = process.env.CLIENTS_KEYWORD_CONNINFO;
  const name = `${PREFIX}keyword-value`;
  try {
    const lease = await pglease.hold(conninfo, name, { ttl: 5000 });
    const client = new pg.Client(pglease.clientConfig(conninfo));
    await client.connect();
    try {
      await lease.transaction(client, (c) => c.query("INSERT INTO client_log (lease_name, note) VALUES ($1, 'keyword=value')", [name]));
    } finally {
      await client.end();
    }
    const row = await leaseRow(name);
    const released = await lease.release();
    report(row.state === 'held' && released, `a libpq keyword = value string (${conninfo}) works for the helper and through clientConfig() for pg`, row);
  } catch (err) {
    report(false, `a libpq keyword = value string (${conninfo}) works for the helper and through clientConfig() for pg`, err);
  }
}

// A session: one keepalive for its leases, its close releases them all, a
// session closed behind its back is a loss, and pools in fair shares.
async function testSession() {
  const aName = `${PREFIX}session-a`;
  const bName = `${PREFIX}session-b`;
  const client = new pg.Client(pglease.clientConfig(CONN));
  await client.connect();
  try {
    await pglease.withSession(CONN, { ttl: 2000 }, async (session) => {
      const a = await session.acquire(aName);
      const b = await session.acquire(bName, { wait: 500 });
      await sleep(5000);
      const states = [(await leaseRow(aName)).state, (await leaseRow(bName)).state];
      report(!session.lost && states.join() === 'held,held' && b.token > a.token && a.token > TWO_53,
        'a session keeps its two leases for 5 s (TTL 2 s) with its keepalive alone', states);
      await a.transaction(client, (c) => c.query("INSERT INTO client_log (lease_name, note) VALUES ($1, 'session')", [aName]));
      await admin('SELECT lease.lease_revoke($1)', [bName]);
      try {
        await b.transaction(client, (c) => c.query("INSERT INTO client_log (lease_name, note) VALUES ($1, 'revoked')", [bName]));
        report(false, "a revoked session lease's fenced transaction throws FencedError");
      } catch (err) {
        report(err instanceof pglease.FencedError && Boolean(err.detail), "a session lease fences: a revoked one's fenced transaction throws FencedError", err);
      }
    });
    report((await leaseRow(aName)).state === 'free', "the end of withSession closes the session: its leases are released");

    const session = await pglease.session(CONN, { ttl: 1500 });
    await session.acquire(aName);
    const aborted = new Promise((resolve) => session.signal.addEventListener('abort', () => resolve(performance.now())));
    await admin('SELECT lease.session_close($1)', [session.id.toString()]);
    const closed = performance.now();
    const took = (await Promise.race([aborted, sleep(3000).then(() => null)])) - closed;
    let refused = null;
    await session.acquire(bName).catch((err) => {
      refused = err;
    });
    const closeError = await session.close().then(() => null, (err) => err);
    report(took >= 0 && took <= 750 && refused instanceof pglease.LeaseLostError && closeError instanceof pglease.LeaseLostError,
      `a session closed behind its back is lost at the next keepalive (${Math.round(took)} ms); acquire and close then reject with LeaseLostError`, refused, closeError);
  } finally {
    await client.end();
  }
}

async function testPool() {
  const pool = `${PREFIX}pool`;
  await admin("SELECT count(lease.pool_put($1, $1 || ':' || i)) FROM generate_series(1, 4) AS i", [pool]);
  const first = await pglease.session(CONN, { ttl: 5000 });
  const second = await pglease.session(CONN, { ttl: 5000 });
  try {
    const mine = await first.claim(pool);
    report(mine.length === 4 && mine.every((m) => JSON.stringify(m.state) === '{}' && typeof m.token === 'bigint'), 'a lone claimer claims the whole pool', mine.map((m) => m.name));
    let theirs = await second.claim(pool);
    const surplus = await first.surplus(pool);
    report(theirs.length === 0 && surplus.length === 2, 'a second claimer: nothing free yet; the first has two beyond its share', theirs, surplus);
    const byName = new Map(mine.map((m) => [m.name, m]));
    const released = [];
    for (const name of surplus) released.push(await byName.get(name).release());
    theirs = await second.claim(pool);
    report(released.join() === 'true,true' && theirs.map((t) => t.name).sort().join() === [...surplus].sort().join(), 'what the first hands back, the second claims', theirs.map((t) => t.name));
    const old = byName.get(surplus[0]);
    const stale = await old.checkpoint({ seq: 99 });
    const fresh = await theirs.find((t) => t.name === old.name).checkpoint({ seq: 1 });
    const { state } = await admin('SELECT state FROM lease.pool_resources WHERE name = $1', [old.name]);
    report(stale === false && fresh === true && state.seq === 1, 'checkpoint under a stale token is false and changes nothing; under the current one it stores the state', stale, fresh, state);
  } finally {
    await first.close();
    await second.close();
  }
}

async function testHeartbeat() {
  const name = `${PREFIX}heartbeat`;
  await pglease.withLease(CONN, name, { ttl: 1000 }, async (lease) => {
    await sleep(3500);
    const row = await leaseRow(name);
    const { recent } = await admin("SELECT clock_timestamp() - renewed_at < interval '0.5 s' AS recent FROM lease.leases WHERE name = $1", [name]);
    report(
      !lease.lost && !lease.signal.aborted && row.state === 'held' && row.token === lease.token.toString() && recent,
      'heartbeats keep a 1 s lease for 3.5 s under the same token',
      row,
      recent,
    );
  });
  report((await leaseRow(name)).state === 'free', 'withLease releases the lease when fn returns');
  try {
    await pglease.withLease(CONN, name, { ttl: 5000 }, async () => {
      throw new SyntaxError('boom');
    });
  } catch (err) {
    report(err instanceof SyntaxError && (await leaseRow(name)).state === 'free', 'withLease releases the lease when fn throws, and rethrows', err);
  }
}

async function testFence() {
  const name = `${PREFIX}fence`;
  const client = new pg.Client(CONN);
  await client.connect();
  const pool = new pg.Pool({ connectionString: CONN, max: 2 });
  try {
    await pglease.withLease(CONN, name, { ttl: 5000 }, async (lease) => {
      await lease.transaction(client, async (c) => {
        await c.query("INSERT INTO client_work (lease_name, note) VALUES ($1, 'fenced')", [name]);
        await c.query("UPDATE client_work SET note = 'updated' WHERE lease_name = $1", [name]);
      });
      const row = await admin('SELECT note, fence_token::text FROM client_work WHERE lease_name = $1', [name]);
      report(
        row && row.note === 'updated' && row.fence_token === lease.token.toString(),
        'lease.transaction(client): INSERT and UPDATE pass the fence trigger; the row carries the token',
        row,
      );
      await lease.transaction(pool, (c) => c.query('DELETE FROM client_work WHERE lease_name = $1', [name]));
      const { count } = await admin('SELECT count(*)::int AS count FROM client_work WHERE lease_name = $1', [name]);
      report(count === 0, 'lease.transaction(pool): DELETE passes the fence trigger', count);

      await client.query('BEGIN');
      await lease.fence(client);
      await client.query("INSERT INTO client_work (lease_name, note) VALUES ($1, 'own transaction')", [name]);
      await client.query('ROLLBACK');
      report(true, 'lease.fence(client) inside a transaction the application began');

      try {
        await client.query('SELECT lease.fenced_write($1, $2::int8)', [name, (lease.token - 1n).toString()]);
        report(false, 'isFenced recognises LF001 from any pg query');
      } catch (err) {
        report(pglease.isFenced(err) && !(err instanceof pglease.FencedError), 'isFenced recognises LF001 from any pg query', err);
      }
    });
  } finally {
    await client.end();
    await pool.end();
  }
}

async function testRevoked() {
  const name = `${PREFIX}revoked`;
  const client = new pg.Client(CONN);
  await client.connect();
  const lease = await pglease.hold(CONN, name, { ttl: 1500 });
  try {
    const aborted = new Promise((resolve) => lease.signal.addEventListener('abort', () => resolve(performance.now())));
    await admin('SELECT lease.lease_revoke($1)', [name]);
    const revoked = performance.now();
    const took = (await Promise.race([aborted, sleep(3000).then(() => null)])) - revoked;
    report(
      took >= 0 && took <= 750 && lease.signal.reason instanceof pglease.LeaseLostError,
      `a revoked lease is lost at the next heartbeat: signal aborted after ${Math.round(took)} ms, reason LeaseLostError`,
      lease.signal.reason,
    );
    try {
      await lease.transaction(client, (c) => c.query("INSERT INTO client_log (lease_name, note) VALUES ($1, 'after revoke')", [name]));
      report(false, 'a fenced transaction under the revoked token throws FencedError');
    } catch (err) {
      const { count } = await admin('SELECT count(*)::int AS count FROM client_log WHERE lease_name = $1', [name]);
      report(err instanceof pglease.FencedError && err.code === 'LF001' && err.cause instanceof pg.DatabaseError && count === 0,
        'a fenced transaction under the revoked token throws FencedError (code LF001, cause pg.DatabaseError) from the fence itself: nothing written to a table without a fence trigger',
        err, count);
      report(typeof err.detail === 'string' && err.detail.length > 0 && err.detail === err.cause.detail && err.message.includes(err.detail),
        "the FencedError keeps the server's DETAIL (err.detail, and in its message)", err);
    }
  } finally {
    await client.end();
  }
  try {
    await lease.release();
    report(false, 'release() after the loss rejects with LeaseLostError');
  } catch (err) {
    report(err instanceof pglease.LeaseLostError, 'release() after the loss rejects with LeaseLostError', err);
  }
}

// Holds the lease, waits for a line on stdin (the parent stops and continues
// this process in between), then tries a fenced write.
async function zombieChild(name) {
  const client = new pg.Client(CONN);
  await client.connect();
  const lease = await pglease.hold(CONN, name, { owner: 'node-zombie', ttl: 1000 });
  console.log(lease.token.toString());
  await new Promise((resolve) => process.stdin.once('data', resolve));
  process.stdin.pause();
  try {
    await lease.transaction(client, (c) => c.query("INSERT INTO client_work (lease_name, note) VALUES ($1, 'zombie')", [name]));
    console.log('written');
  } catch (err) {
    console.log(err instanceof pglease.FencedError ? `fenced ${err.code}` : `error ${err}`);
  }
  await Promise.race([new Promise((resolve) => lease.signal.addEventListener('abort', resolve)), sleep(2000)]);
  console.log(await lease.release().then(() => 'not lost', (err) => (err instanceof pglease.LeaseLostError ? 'lost' : `error ${err}`)));
  await client.end();
}

async function testZombie() {
  const name = `${PREFIX}zombie`;
  const child = spawn(process.execPath, [__filename, '--zombie', name], { stdio: ['pipe', 'pipe', 'inherit'] });
  const lines = readline.createInterface({ input: child.stdout })[Symbol.asyncIterator]();
  const nextLine = async () => (await lines.next()).value;
  try {
    const zombieToken = BigInt(await nextLine());
    child.kill('SIGSTOP');
    await sleep(1300);
    await pglease.withLease(CONN, name, { owner: 'node-successor', ttl: 5000, wait: 3000 }, async (successor) => {
      child.kill('SIGCONT');
      child.stdin.write('go\n');
      const outcome = await nextLine();
      const ending = await nextLine();
      const { count } = await admin('SELECT count(*)::int AS count FROM client_work WHERE lease_name = $1', [name]);
      report(outcome === 'fenced LF001' && count === 0 && successor.token > zombieToken,
        'a zombie stopped past its TTL: its fenced write after the takeover throws FencedError, nothing written', outcome, count);
      report(ending === 'lost', "the zombie's helper reports the loss once it runs again", ending);
    });
  } finally {
    child.kill('SIGKILL');
  }
}

async function testOutage() {
  const name = `${PREFIX}outage`;
  const lease = await pglease.hold(CONN, name, { ttl: 4000 });
  let lostAt = null;
  lease.signal.addEventListener('abort', () => {
    lostAt = Date.now();
  });
  await sleep(1500); // past the first heartbeat
  execSync(process.env.CLIENTS_SERVER_STOP);
  const stopped = Date.now();
  await Promise.race([new Promise((resolve) => lease.signal.addEventListener('abort', resolve)), sleep(5000)]);
  const releaseError = await lease.release().then(() => null, (err) => err);
  execSync(process.env.CLIENTS_SERVER_START);
  const row = await leaseRow(name);
  const margin = lostAt === null ? null : row.expires * 1000 - lostAt;
  report(
    lostAt !== null && margin >= 600 && lostAt - stopped < 4000 && releaseError instanceof pglease.LeaseLostError,
    `the database stops: signal aborted ${margin && Math.round(margin)} ms before the lease expires on the server (grace 800 + TTL/10 400 expected, at least 600 required; TTL 4 s), ${lostAt && lostAt - stopped} ms after the outage began`,
    releaseError,
  );
}

// Semaphores, shared leases, all-or-none grants and leader values (lease 1.3).

const leaderCount = async (name) => Number((await admin('SELECT count(*)::int AS n FROM lease.leader($1)', [name])).n);

async function waitForWaiter(name, mode) {
  const deadline = Date.now() + 5000;
  while (Date.now() < deadline) {
    const { n } = await admin('SELECT count(*)::int AS n FROM lease.waiters WHERE name = $1 AND mode = $2', [name, mode]);
    if (n > 0) return true;
    await sleep(20);
  }
  return false;
}

// Holds (and releases at once) in the background: resolves to ['acquired', token] or the error's name.
const holdInBackground = (name, options) =>
  pglease.hold(CONN, name, options).then(
    async (lease) => {
      const token = lease.token;
      await lease.release();
      return ['acquired', token];
    },
    (err) => [err.constructor.name, null],
  );

async function testSemaphore() {
  const name = `${PREFIX}semaphore`;
  const a = await pglease.hold(CONN, name, { ttl: 5000, permits: 2 });
  const b = await pglease.hold(CONN, name, { ttl: 5000, permits: 2 });
  const holders = await leaderCount(name);
  const third = await holdInBackground(name, { ttl: 5000, permits: 2, wait: 300 });
  report(
    a.token !== b.token && holders === 2 && third[0] === 'NotAcquiredError',
    'semaphore: two holders of 2 permits, each with its own token; a third is not acquired after waiting 0.3 s',
    a.token, b.token, holders, third,
  );
  let settled = null;
  const waiting = holdInBackground(name, { ttl: 5000, permits: 2, wait: 10000 }).then((r) => (settled = r));
  const queued = await waitForWaiter(name, 'semaphore');
  const before = settled;
  await b.release();
  const got = await waiting;
  report(
    queued && before === null && got[0] === 'acquired' && got[1] > b.token,
    'semaphore: a third holder waits in the server\'s queue and gets the permit the second gives back',
    queued, before, got,
  );
  await a.release();
  report((await leaderCount(name)) === 0, 'semaphore: every permit released');
}

async function testSemaphoreRevoked() {
  const name = `${PREFIX}semaphore-revoked`;
  const permit = await pglease.hold(CONN, name, { ttl: 2000, permits: 3 });
  const client = new pg.Client(pglease.clientConfig(CONN));
  await client.connect();
  try {
    const write = (note) => permit.transaction(client, (c) => c.query('INSERT INTO client_log VALUES ($1, $2)', [name, note]));
    await write('under the permit');
    await admin('SELECT lease.lease_revoke($1)', [name]);
    await Promise.race([new Promise((resolve) => permit.signal.addEventListener('abort', resolve)), sleep(3000)]);
    report(permit.signal.aborted && permit.signal.reason instanceof pglease.LeaseLostError, 'semaphore: a revoked permit is signalled as a loss (the signal aborts)');
    let outcome = 'written';
    try {
      await write('after the revoke');
    } catch (err) {
      outcome = err instanceof pglease.FencedError && err.detail ? 'FencedError' : `${err}`;
    }
    const { n } = await admin('SELECT count(*)::int AS n FROM client_log WHERE lease_name = $1', [name]);
    report(
      outcome === 'FencedError' && n === 1,
      'semaphore: the revoked permit\'s next fenced transaction rejects with FencedError (with DETAIL), nothing written',
      outcome, n,
    );
  } finally {
    await client.end();
    await permit.release().catch(() => {});
  }
}

async function testShared() {
  const name = `${PREFIX}shared`;
  const r1 = await pglease.hold(CONN, name, { ttl: 5000, shared: true });
  const r2 = await pglease.hold(CONN, name, { ttl: 5000, shared: true });
  const together = await leaderCount(name);
  let settled = null;
  const exclusive = holdInBackground(name, { ttl: 5000, wait: 10000 }).then((r) => (settled = r));
  const queued = await waitForWaiter(name, 'exclusive');
  await sleep(200);
  const early = settled;
  const still = await leaderCount(name);
  report(
    together === 2 && r1.token !== r2.token && queued && early === null && still === 2,
    'shared: two shared holders together, each with its own token, while an exclusive request waits',
    together, still, queued, early,
  );
  await r1.release();
  await r2.release();
  const got = await exclusive;
  report(got[0] === 'acquired', 'shared: the exclusive request is granted once both shared holders have released', got);
}

async function testAcquireAll() {
  const [a, b, c] = [`${PREFIX}acct:b`, `${PREFIX}acct:a`, `${PREFIX}acct:c`];
  const both = await pglease.holdAll(CONN, [a, b], { ttl: 2000 });
  const client = new pg.Client(pglease.clientConfig(CONN));
  await client.connect();
  try {
    const { tokens } = await admin(
      'SELECT array_agg(token::text ORDER BY array_position($1::text[], name)) AS tokens FROM lease.leases WHERE name = ANY($1::text[]) AND owner IS NOT NULL',
      [[a, b]],
    );
    report(
      both.names.join() === [a, b].join() && [...both.tokens.keys()].join() === [a, b].join() &&
        both.tokenOf(a) === BigInt(tokens[0]) && both.tokenOf(b) === BigInt(tokens[1]) && tokens[0] !== tokens[1] && both.token === null,
      'acquire all: one token per name, aligned with the names given, each the server\'s',
      [...both.tokens], tokens,
    );
    const write = (...names) =>
      both.transaction(client, async (c) => {
        for (const name of names) {
          await c.query("INSERT INTO client_work (lease_name, note, fence_token) VALUES ($1, 'both', $2)", [name, both.tokenOf(name).toString()]);
        }
      });
    await write(a, b);
    const other = await pglease.holdAll(CONN, [c, b], { ttl: 5000, wait: 200 }).then(
      async (l) => (await l.release(), 'acquired'),
      (err) => err.constructor.name,
    );
    const cRow = await admin("SELECT coalesce((SELECT state FROM lease.status WHERE name = $1), 'never granted') AS state", [c]);
    report(
      other === 'NotAcquiredError' && cRow.state !== 'held',
      'acquire all: an overlapping set is not acquired, and holds nothing (all or none)',
      other, cRow,
    );
    await admin('SELECT lease.lease_revoke($1)', [b]);
    let outcome = 'written';
    try {
      await write(a);
    } catch (err) {
      outcome = err instanceof pglease.FencedError ? 'FencedError' : `${err}`;
    }
    const { n } = await admin('SELECT count(*)::int AS n FROM client_work WHERE lease_name IN ($1, $2)', [a, b]);
    report(
      outcome === 'FencedError' && n === 2,
      'acquire all: fenced rows under each name\'s own token; one name revoked, the next fenced transaction rejects with FencedError',
      outcome, n,
    );
  } finally {
    await client.end();
    await both.release().catch(() => {});
  }
}

async function testValues() {
  const name = `${PREFIX}leader`;
  const lease = await pglease.hold(CONN, name, { owner: 'node-leader', ttl: 2000 });
  const client = new pg.Client(pglease.clientConfig(CONN));
  await client.connect();
  try {
    const stored = await lease.setValue({ addr: '10.0.0.5:5432' });
    const holders = await pglease.leader(client, name);
    report(
      stored === true && holders.length === 1 && holders[0].owner === 'node-leader' && holders[0].token === lease.token &&
        holders[0].value.addr === '10.0.0.5:5432' && holders[0].expiresAt instanceof Date,
      'setValue, then leader(name): owner, token, the value published, expiresAt',
      stored, holders,
    );
    await admin('SELECT lease.lease_revoke($1)', [name]);
    // setValue still answers after the loss: false
    await Promise.race([new Promise((resolve) => lease.signal.addEventListener('abort', resolve)), sleep(3000)]);
    const stale = await lease.setValue({ addr: 'stale' });
    const staleClient = await lease.setValue({ addr: 'stale' }, client);
    const after = await pglease.leader(CONN, name);
    report(
      stale === false && staleClient === false && after.length === 0,
      'setValue with a stale token resolves false (on the helper\'s client and on yours), and publishes nothing',
      stale, staleClient, after,
    );
  } finally {
    await client.end();
    await lease.release().catch(() => {});
  }
}

async function testSessionPrimitives() {
  const s1 = await pglease.session(CONN, { ttl: 5000 });
  const s2 = await pglease.session(CONN, { ttl: 5000 });
  const names = [`${PREFIX}s-acct:2`, `${PREFIX}s-acct:1`];
  const sem = `${PREFIX}s-semaphore`;
  const shared = `${PREFIX}s-shared`;
  try {
    const held = await s1.acquireAll(names);
    const { tokens } = await admin(
      'SELECT array_agg(token::text ORDER BY array_position($1::text[], name)) AS tokens FROM lease.leases WHERE name = ANY($1::text[]) AND session = $2',
      [names, s1.id.toString()],
    );
    report(
      held.tokenOf(names[0]) === BigInt(tokens[0]) && held.tokenOf(names[1]) === BigInt(tokens[1]),
      'session: acquireAll gives a token per name, aligned with the names',
      [...held.tokens], tokens,
    );
    const permit = await s1.acquire(sem, { permits: 1 });
    const second = await s2.acquire(sem, { permits: 1, wait: 200 }).then(() => 'acquired', (err) => err.constructor.name);
    const r1 = await s1.acquire(shared, { shared: true });
    const r2 = await s2.acquire(shared, { shared: true });
    const published = await r1.setValue('reader-1');
    const values = (await pglease.leader(CONN, shared)).map((h) => String(h.value)).sort();
    report(
      permit.token > 0n && second === 'NotAcquiredError' && r1.token !== r2.token && published === true && values.join() === ['null', 'reader-1'].join(),
      'session: a semaphore permit (a second session is not acquired) and two shared grants, one with a value',
      second, values,
    );
  } finally {
    await s1.close().catch(() => {});
    await s2.close().catch(() => {});
  }
  report(
    (await leaderCount(sem)) === 0 && (await leaderCount(shared)) === 0 && (await leaderCount(names[0])) === 0,
    'session: closing the sessions ends their permits, shared and all-or-none grants',
  );
}

async function testPrimitivesBadInput() {
  const unreachable = 'host=127.0.0.1 port=1 dbname=postgres connect_timeout=1';
  const checks = [
    [() => pglease.hold(unreachable, 'x', { permits: 2, shared: true }), 'pglease: permits and shared exclude each other'],
    [() => pglease.hold(unreachable, 'x', { permits: 0 }), 'pglease: permits must be between 1 and 10000'],
    [() => pglease.holdAll(unreachable, []), 'pglease: no lease names given'],
    [() => pglease.holdAll(unreachable, ['a', '']), 'pglease: the lease name must not be empty'],
  ];
  for (const [call, message] of checks) {
    let got = 'no error';
    try {
      await call();
    } catch (err) {
      got = err instanceof TypeError || err instanceof RangeError ? err.message : `${err}`;
    }
    report(got === message, `bad input refused before any round trip: ${message}`, got);
  }
}

// watch (the partition is run.sh's, with the README's example): where it
// starts, and bad input.
async function watchEvents(base, n) {
  for (let i = 1; i <= n; i++) await admin("SELECT lease.lease_acquire($1, 'watch-test', '1 hour')", [`${base}-${i}`]);
}

// "position token" of lease.history's rows matching where ($1) up to position last, in position order.
async function historyRows(where, from, last) {
  const client = new pg.Client(pglease.clientConfig(CONN));
  await client.connect();
  try {
    const result = await client.query(
      `SELECT xid || '/' || ordinal || ' ' || coalesce(token::text, '-') AS row FROM lease.history WHERE ${where}
          AND (xid, ordinal) <= (split_part($2, '/', 1)::xid8, split_part($2, '/', 2)::int8) ORDER BY xid, ordinal`,
      [from, last],
    );
    return result.rows.map((r) => r.row);
  } finally {
    await client.end();
  }
}

// Watches until the event of name last (made by before() once the first
// event came, or after 15 s if none came): "position token" of each, whether
// each was replayed, the last position.
async function watchUntil(options, before, last) {
  const rows = [];
  const replayed = [];
  let made = false;
  const make = async () => {
    if (made) return;
    made = true;
    await before();
  };
  const fallback = setTimeout(make, 15000);
  const timer = setTimeout(() => {
    report(false, `watch: ${last} came within 25 s`, rows);
    process.exit(1);
  }, 25000);
  for await (const event of pglease.watch(CONN, options)) {
    await make();
    rows.push(`${event.position} ${event.token ?? '-'}`);
    replayed.push(event.replayed);
    if (event.name === last) break;
  }
  clearTimeout(timer);
  clearTimeout(fallback);
  return { rows, replayed, last: rows[rows.length - 1].split(' ')[0] };
}

async function testWatchSince() {
  const base = `${PREFIX}watch-since`;
  await watchEvents(base, 5);
  const since = (await admin("SELECT xid || '/' || ordinal AS p FROM lease.history WHERE name = $1", [`${base}-2`])).p;
  let end = `${base}-end`;
  let got = await watchUntil({ since }, () => watchEvents(end, 1), `${end}-1`);
  let want = await historyRows("(xid, ordinal) > (split_part($1, '/', 1)::xid8, split_part($1, '/', 2)::int8)", since, got.last);
  report(
    got.rows.length >= 4 && got.rows.join() === want.join() && got.replayed[0] && !got.replayed[got.replayed.length - 1],
    'watch: since a position replays every event after it (replayed), then goes on live, each once, in order; BigInt tokens exact, live and replayed',
    { got, want },
  );
  // A Date holds milliseconds: the history rows from the same Date on.
  const at = (await admin('SELECT at FROM lease.history WHERE name = $1', [`${base}-3`])).at;
  end = `${base}-time-end`;
  got = await watchUntil({ since: at }, () => watchEvents(end, 1), `${end}-1`);
  want = await historyRows('at >= $1', at, got.last);
  report(got.rows.length >= 4 && got.rows.join() === want.join(), 'watch: since a Date replays the events recorded from then on, in position order, then goes on live', {
    got,
    want,
  });
}

async function testWatchBadInput() {
  for (const bad of ['garbage', '12/', '/3', '1/2/3', '-1/2', '1/-2', '03:00', '', '1/9223372036854775808', 42, new Date('nonsense')]) {
    let got;
    try {
      pglease.watch('host=/nonexistent dbname=x', { since: bad });
      got = 'accepted';
    } catch (err) {
      got = `${err.name}: ${err.message}`;
    }
    report(got === "TypeError: pglease: since must be a position XID/N (an event's position) or a Date", `watch: since ${bad instanceof Date ? "an invalid Date" : JSON.stringify(bad)} throws a TypeError at once`, got);
  }
}

// A server without lease 1.4's events_horizon: an error that connecting again
// would not mend is thrown from the loop.
async function testWatchServerError() {
  await admin('CREATE DATABASE watch_no_lease_node');
  try {
    const url = new URL(CONN);
    url.pathname = '/watch_no_lease_node';
    let got = 'no error';
    const timer = setTimeout(() => {
      report(false, 'watch: the server error came within 10 s');
      process.exit(1);
    }, 10000);
    try {
      for await (const event of pglease.watch(url.toString())) got = `an event: ${event.event}`;
    } catch (err) {
      got = err;
    }
    clearTimeout(timer);
    report(got instanceof pg.DatabaseError && /does not exist/.test(got.message), 'watch: an error of the server (no lease extension) is thrown from the loop', String(got));
  } finally {
    await admin('DROP DATABASE watch_no_lease_node');
  }
}

async function main() {
  const tests = [testAcquireReleaseBigint, testNotAcquired, testWaiterWoken, testErrors, testBadInput, testKeywordValue, testSession, testPool, testHeartbeat, testFence, testRevoked,
    testSemaphore, testSemaphoreRevoked, testShared, testAcquireAll, testValues, testSessionPrimitives, testPrimitivesBadInput, testWatchSince, testWatchBadInput, testWatchServerError, testZombie, testOutage];
  for (const test of tests) {
    try {
      await test();
    } catch (err) {
      report(false, `${test.name} ran`, err);
    }
  }
  console.log('# end');
}

if (process.argv[2] === '--zombie') {
  zombieChild(process.argv[3]).catch((err) => {
    console.log(`error ${err}`);
    process.exitCode = 1;
  });
} else {
  main();
}
