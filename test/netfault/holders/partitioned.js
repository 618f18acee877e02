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
  const lease = await hold(conninfo, name, { ttl });
  await write(lease, 'held');
  console.log(`held ${lease.token}`);
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
  try {
    await write(lease, 'zombie');
    console.log('written');
  } catch (err) {
    console.log(err instanceof FencedError ? 'fenced' : `error ${err.message}`);
  }
  await lease.release().catch(() => {});
  process.exit(0);
}

main().catch((err) => {
  console.log(`error ${err.message}`);
  process.exit(1);
});
