'use strict';
// bench/etcd's load generator: one Node.js process drives either etcd (the
// etcd3 package, gRPC) or lease (the pg package, libpq's wire protocol), so
// that both sides pay the same client runtime. See bench/README.md.
//
//   node loadgen.js SIDE CLIENTS WARMUP_S DURATION_S
//
// Runs CLIENTS concurrent clients, each with its own connection and its own
// name or key, for WARMUP_S seconds unrecorded, then DURATION_S seconds
// recorded, and prints one line: SIDE, CLIENTS, ops/s, p50 and p99 (ms),
// measured units, and the load generator's own CPU time (user + system) per
// operation in the recorded window (us): it shares the cores with the
// server it drives, and the two client libraries do not cost the same.
// A lock + unlock pair counts as two operations (a lock or an unlock is one,
// as in bench/async), and its latency is the pair's; a keepalive is one
// operation. etcd is reached at ETCD_ENDPOINT (host:port), PostgreSQL through
// the libpq environment (PGHOST, PGPORT, PGUSER, PGDATABASE).
//
// Sides:
//   etcd-lock          lease grant (ttl 30 s) + txn "create the key if absent,
//                      attached to the lease" + lease revoke: a lock and its
//                      unlock for a client that holds no lease yet
//   etcd-session-lock  txn (create if absent) + delete of the key, under a
//                      lease granted once per client (a lock taken inside an
//                      etcd session, as concurrency.Mutex does when
//                      uncontended)
//   lease-pair         lease_acquire (ttl 30 s) + lease_release, two
//                      autocommit transactions (bench/workloads/lease_acqrel.sql)
//   lease-pair-async   the same with lease.synchronous_commit = off
//   etcd-keepalive-once   etcd3's Lease.keepaliveOnce() on a 1-hour lease (a
//                      LeaseKeepAlive stream per call)
//   etcd-keepalive-stream one keepalive request and its answer on a
//                      LeaseKeepAlive stream opened once per client (what
//                      etcd's clients do to keep a lease alive)
//   lease-heartbeat    lease_heartbeat of a lease held for 1 hour
//                      (bench/workloads/lease_heartbeat.sql)
//   lease-heartbeat-async the same with lease.synchronous_commit = off
// Every answer is checked (a token, true, a succeeded txn, an unexpired
// lease): a client that gets anything else stops the run with an error, so
// that "did nothing" is never counted as work.

const { Etcd3 } = require('etcd3');
const pg = require('pg');

const [side, clientsArg, warmupArg, durationArg] = process.argv.slice(2);
const clients = Number(clientsArg);
const warmupMs = Number(warmupArg) * 1000;
const durationMs = Number(durationArg) * 1000;
if (!side || !(clients > 0) || !(warmupMs >= 0) || !(durationMs > 0)) {
    console.error('usage: node loadgen.js SIDE CLIENTS WARMUP_S DURATION_S');
    process.exit(64);
}
const runId = `${process.pid}`;

function fail(message) {
    throw new Error(`${side}: ${message}`);
}

// Each side: setup(i) -> state, op(state) -> one measured unit, teardown(state).
function etcdClient() {
    return new Etcd3({ hosts: `http://${process.env.ETCD_ENDPOINT}` });
}

async function pgClient(asynchronous) {
    const client = new pg.Client();
    await client.connect();
    if (asynchronous) {
        await client.query('SET lease.synchronous_commit = off');
        const { rows } = await client.query("SELECT current_setting('lease.synchronous_commit') AS v");
        if (rows[0].v !== 'off') fail('lease.synchronous_commit did not take');
    }
    return client;
}

function leasePair(asynchronous) {
    return {
        units: 2,
        async setup(i) {
            return { db: await pgClient(asynchronous), name: `ar:${i}`, owner: `w${i}` };
        },
        async op(s) {
            const acquired = await s.db.query({
                name: 'acquire', text: "SELECT lease.lease_acquire($1, $2, '30 seconds') AS tok", values: [s.name, s.owner],
            });
            const tok = acquired.rows[0].tok;
            if (tok === null) fail(`lease_acquire(${s.name}) returned NULL`);
            const released = await s.db.query({
                name: 'release', text: 'SELECT lease.lease_release($1, $2) AS ok', values: [s.name, tok],
            });
            if (released.rows[0].ok !== true) fail(`lease_release(${s.name}, ${tok}) returned ${released.rows[0].ok}`);
        },
        async teardown(s) { await s.db.end(); },
    };
}

function leaseHeartbeat(asynchronous) {
    return {
        units: 1,
        async setup(i) {
            const db = await pgClient(asynchronous);
            const name = `hb:${runId}:${i}`;
            const { rows } = await db.query("SELECT lease.lease_acquire($1, $2, '1 hour') AS tok", [name, `w${i}`]);
            if (rows[0].tok === null) fail(`lease_acquire(${name}) returned NULL`);
            return { db, name, tok: rows[0].tok };
        },
        async op(s) {
            const { rows } = await s.db.query({
                name: 'heartbeat', text: 'SELECT lease.lease_heartbeat($1, $2) AS ok', values: [s.name, s.tok],
            });
            if (rows[0].ok !== true) fail(`lease_heartbeat(${s.name}, ${s.tok}) returned ${rows[0].ok}`);
        },
        async teardown(s) {
            await s.db.query('SELECT lease.lease_release($1, $2)', [s.name, s.tok]);
            await s.db.end();
        },
    };
}

const sides = {
    'etcd-lock': {
        units: 2,
        async setup(i) {
            const etcd = etcdClient();
            await etcd.get('warm-up').string(); // connect before the clock starts
            return { etcd, key: `ar:${i}`, owner: `w${i}` };
        },
        async op(s) {
            const lease = s.etcd.lease(30, { autoKeepAlive: false });
            const id = await lease.grant();
            const txn = await s.etcd.if(s.key, 'Create', '==', 0)
                .then(s.etcd.put(s.key).value(s.owner).lease(id))
                .commit();
            if (!txn.succeeded) fail(`key ${s.key} was not free`);
            await lease.revoke();
        },
        async teardown(s) { s.etcd.close(); },
    },
    'etcd-session-lock': {
        units: 2,
        async setup(i) {
            const etcd = etcdClient();
            const lease = etcd.lease(3600, { autoKeepAlive: false });
            return { etcd, lease, id: await lease.grant(), key: `sl:${i}`, owner: `w${i}` };
        },
        async op(s) {
            const txn = await s.etcd.if(s.key, 'Create', '==', 0)
                .then(s.etcd.put(s.key).value(s.owner).lease(s.id))
                .commit();
            if (!txn.succeeded) fail(`key ${s.key} was not free`);
            const deleted = await s.etcd.delete().key(s.key).exec();
            if (String(deleted.deleted) !== '1') fail(`delete of ${s.key} deleted ${deleted.deleted} keys`);
        },
        async teardown(s) { await s.lease.revoke(); s.etcd.close(); },
    },
    'etcd-keepalive-once': {
        units: 1,
        async setup() {
            const etcd = etcdClient();
            const lease = etcd.lease(3600, { autoKeepAlive: false });
            await lease.grant();
            return { etcd, lease };
        },
        async op(s) {
            const res = await s.lease.keepaliveOnce(); // throws if the lease expired
            if (!(Number(res.TTL) > 0)) fail(`keepalive answered TTL ${res.TTL}`);
        },
        async teardown(s) { await s.lease.revoke(); s.etcd.close(); },
    },
    'etcd-keepalive-stream': {
        units: 1,
        async setup() {
            const etcd = etcdClient();
            const lease = etcd.lease(3600, { autoKeepAlive: false });
            const id = await lease.grant();
            const stream = await etcd.leaseClient.leaseKeepAlive();
            const s = { etcd, lease, id, stream, waiting: null };
            stream.on('data', res => { const w = s.waiting; s.waiting = null; w.resolve(res); });
            stream.on('error', err => { if (s.waiting) s.waiting.reject(err); });
            return s;
        },
        async op(s) {
            const res = await new Promise((resolve, reject) => {
                s.waiting = { resolve, reject };
                s.stream.write({ ID: s.id });
            });
            if (!(Number(res.TTL) > 0)) fail(`keepalive answered TTL ${res.TTL}`);
        },
        async teardown(s) { s.stream.end(); await s.lease.revoke(); s.etcd.close(); },
    },
    'lease-pair': leasePair(false),
    'lease-pair-async': leasePair(true),
    'lease-heartbeat': leaseHeartbeat(false),
    'lease-heartbeat-async': leaseHeartbeat(true),
};

function percentile(sorted, p) {
    if (sorted.length === 0) return NaN;
    return sorted[Math.min(sorted.length - 1, Math.ceil(sorted.length * p) - 1)];
}

async function main() {
    const impl = sides[side];
    if (!impl) fail(`unknown side; one of ${Object.keys(sides).join(' ')}`);
    const states = await Promise.all(Array.from({ length: clients }, (_, i) => impl.setup(i)));
    const t0 = performance.now();
    const measureStart = t0 + warmupMs;
    const measureEnd = measureStart + durationMs;
    const latencies = [];
    let cpuStart, cpu;
    setTimeout(() => { cpuStart = process.cpuUsage(); }, warmupMs);
    setTimeout(() => { cpu = process.cpuUsage(cpuStart); }, warmupMs + durationMs);
    // A client starts operations until the window closes; an operation counts
    // if it started and ended inside the window.
    await Promise.all(states.map(async s => {
        for (;;) {
            const start = performance.now();
            if (start >= measureEnd) break;
            await impl.op(s);
            const end = performance.now();
            if (start >= measureStart && end <= measureEnd) latencies.push(end - start);
        }
    }));
    if (!cpu) cpu = process.cpuUsage(cpuStart); // the last operation ended before the timer
    await Promise.all(states.map(s => impl.teardown(s)));
    latencies.sort((a, b) => a - b);
    const opsPerSecond = (latencies.length * impl.units) / (durationMs / 1000);
    console.log([side, clients, opsPerSecond.toFixed(1), percentile(latencies, 0.5).toFixed(3),
        percentile(latencies, 0.99).toFixed(3), latencies.length,
        ((cpu.user + cpu.system) / (latencies.length * impl.units)).toFixed(1)].join('\t'));
}

main().then(() => process.exit(0), err => {
    console.error(err && err.stack ? err.stack : err);
    process.exit(1);
});
