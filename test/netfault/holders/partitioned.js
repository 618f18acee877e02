// A client helper's lease holder for test/netfault/run.sh (Node.js); see
// partitioned.py for what it prints.
'use strict';
const readline = require('readline');
const pg = require('pg');
const { hold, clientConfig, FencedError } = require('pglease');

const conninfo = process.env.NF_CONNINFO;
const name = process.env.NF_NAME;
const ttl = Number(process.env.NF_TTL_MS);
const INSERT = 'INSERT INTO nf_work (lease_name, note) VALUES ($1, $2)';
// The wall clock in microseconds for the history log, from a clock of
// milliseconds: rounded down before a call, up after it, so that the window
// still holds the call.
const before = () => Date.now() * 1000;
const after = () => (Date.now() + 1) * 1000;

async function write(lease, note) {
  const client = new pg.Client({ ...clientConfig(conninfo), connectionTimeoutMillis: 5000 });
  client.on('error', () => {});
  await client.connect();
  try {
    await lease.transaction(client, (c) => c.query(INSERT, [name, note]));
  } finally {
    client.end().catch(() => {});
  }
}

async function main() {
  const acquireInvoke = before();
  const lease = await hold(conninfo, name, { ttl });
  const acquireComplete = after();
  let writeInvoke = before();
  await write(lease, 'held');
  console.log(`held ${lease.token} ${acquireInvoke} ${acquireComplete} ${writeInvoke} ${after()}`);
  await new Promise((resolve) => {
    const timer = setTimeout(resolve, 30000);
    lease.signal.addEventListener('abort', () => {
      console.log(`lost ${Date.now()}`);
      clearTimeout(timer);
      resolve();
    });
  });
  const lines = readline.createInterface({ input: process.stdin });
  await new Promise((resolve) => lines.once('line', resolve).once('close', resolve));
  lines.close();
  writeInvoke = before();
  try {
    await write(lease, 'zombie');
    console.log(`written ${writeInvoke} ${after()}`);
  } catch (err) {
    const times = `${writeInvoke} ${after()}`;
    console.log(err instanceof FencedError ? `fenced ${times}` : `error ${times} ${err.message}`);
  }
  await lease.release().catch(() => {});
  process.exit(0);
}

main().catch((err) => {
  console.log(`error ${err.message}`);
  process.exit(1);
});
