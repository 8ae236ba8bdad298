// One capsule must not take the control plane down:
// - a capsule whose proof cannot be built (its stored trail is corrupt) does
//   not stop start-up; recovery logs it and retries it under its own budget
//   with backoff on the injected clock, other tenants are served (and swept),
//   and the capsule ends `expired_unclean` without a proof;
// - a trail of 300,000 events (written before the cap existed) is destroyed by
//   a child `capsule serve` with bounded memory (VmHWM from /proc) and a
//   bounded response, while another tenant keeps getting answers.
import t from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { activityRoot, verifyProof } from '../../shared/proof/index.js';
import { RunnerClient } from '../../shared/node/runner-client.js';
import { isoMicros } from '../../shared/time.js';
import { removeStateDir, reserveUidBlock, startRunner } from '../helpers/runner.js';
import { dbQuery, freshDb, start, testMasterKeyFile, serveProcess } from './harness.js';

t.test('sqlite: a poisoned capsule in recovery does not stop start-up and ends expired_unclean', async (t) => {
  const runner = await startRunner();
  t.teardown(() => runner.stop());
  const db = await freshDb('sqlite');
  t.teardown(() => db.drop());
  const s1 = await start('sqlite', new RunnerClient(runner.socketPath), { CAPSULE_RATE_LIMITS: 'off' }, db);
  const a = await s1.api.signup();
  const b = await s1.api.signup();
  const p = (await s1.api.req('POST', '/v1/capsules', { key: a.key, json: {} })).body;
  const q = (await s1.api.req('POST', '/v1/capsules', { key: b.key, json: {} })).body;
  await s1.close();
  // Poison P: its stored trail no longer parses, so no proof of it can be built; the runner lost it.
  await dbQuery('sqlite', db, `update "activity_events" set "fields" = '{not json' where "capsule_id" = ?`, [p.id]);
  await runner.client.destroy(p.id);

  let offset = 0;
  const clock = { nowMs: () => Date.now() + offset, nowIso: () => isoMicros(Date.now() + offset) };
  const s2 = await start(
    'sqlite',
    new RunnerClient(runner.socketPath),
    { CAPSULE_RATE_LIMITS: 'off', CAPSULE_SWEEP_INTERVAL_MS: '50' },
    db,
    { clock },
  );
  t.teardown(s2.close);
  t.ok(s2.cp.recovery, 'recovery completed at start');
  t.same(s2.cp.recovery?.failed, [p.id], 'the poisoned capsule is reported failed, alone');
  t.equal((await s2.api.req('GET', '/v1/health/ready')).status, 200, 'the service is ready');
  const hi = await s2.api.req('POST', `/v1/capsules/${q.id}/exec`, { key: b.key, json: { command: 'echo hi' } });
  t.equal(hi.body.stdout, 'hi\n', 'another tenant is served');
  const fresh = await s2.api.req('POST', '/v1/capsules', { key: b.key, json: { ttl: 3600 } });
  t.equal(fresh.status, 201, 'and can create capsules');

  // Each sweep retries P once its backoff passed; the clock jumps past the longest backoff each round.
  let status = '';
  for (let round = 0; round < 20 && status !== 'expired_unclean'; round++) {
    offset += 61_000;
    await new Promise((r) => setTimeout(r, 200));
    status = (await s2.api.req('GET', `/v1/capsules/${p.id}`, { key: a.key })).body.status;
  }
  t.equal(status, 'expired_unclean', 'after its retry budget the poisoned capsule ends expired_unclean');
  t.equal((await s2.api.req('GET', `/v1/proofs/${p.id}`, { key: a.key })).status, 404, 'with no proof');
  // Meanwhile the sweeper kept doing its work for others: Q's TTL ran out and it has its proof.
  const qs = (await s2.api.req('GET', `/v1/capsules/${q.id}`, { key: b.key })).body;
  t.equal(qs.status, 'expired', 'the other tenant was swept normally');
  const qp = await s2.api.req('GET', `/v1/proofs/${q.id}`, { key: b.key });
  t.ok(verifyProof(qp.body.cdp).valid, 'with a proof that verifies');
  const again = await s2.api.req('POST', '/v1/capsules', { key: a.key, json: {} });
  t.equal(again.status, 201, 'the poisoned tenant got its live slot back');
});

/** A /proc/<pid>/status figure in bytes (VmRSS, VmHWM). */
function procKb(pid: number, field: string): number {
  const m = new RegExp(`^${field}:\\s+(\\d+) kB`, 'm').exec(readFileSync(`/proc/${pid}/status`, 'utf8'));
  return Number(m?.[1] ?? NaN) * 1024;
}

const EVENTS = 300_000;

t.test('sqlite: a 300,000-event trail destroys with bounded memory while another tenant is served', async (t) => {
  const db = await freshDb('sqlite');
  const dataDir = mkdtempSync(join(tmpdir(), 'cp-trail-'));
  const uids = reserveUidBlock(64);
  const runnerDir = join('/run/capsule-runner', createHash('sha256').update(dataDir).digest('hex').slice(0, 16));
  t.teardown(async () => {
    await db.drop();
    removeStateDir(runnerDir);
    removeStateDir(dataDir);
    uids.release();
  });
  const env: NodeJS.ProcessEnv = {
    PATH: process.env.PATH,
    DATABASE_URL: db.url,
    CAPSULE_MASTER_KEY_FILE: testMasterKeyFile(dataDir),
    LOG_LEVEL: 'warn',
    CAPSULE_RATE_LIMITS: 'off',
    CAPSULE_RUNNER_UID_BASE: String(uids.base),
    CAPSULE_RUNNER_UID_COUNT: String(uids.count),
    CAPSULE_RUNNER_CGROUP_NAME: `capsule-trailtest-${randomBytes(6).toString('hex')}`,
  };
  const { child, api } = await serveProcess(env, dataDir);
  t.teardown(async () => {
    child.kill('SIGTERM');
    if (child.exitCode === null && child.signalCode === null) await new Promise((r) => child.once('exit', r));
  });
  const a = await api.signup();
  const b = await api.signup();
  const x = (await api.req('POST', '/v1/capsules', { key: a.key, json: {} })).body;
  const y = (await api.req('POST', '/v1/capsules', { key: b.key, json: {} })).body;

  // The trail as the unbounded control plane stored it: small streaming events after CapsuleStarted.
  const { default: Database } = await import('libsql');
  const sql = new Database(db.url.replace(/^file:/, ''));
  sql.pragma('busy_timeout = 10000');
  const ins = sql.prepare(
    'insert into "activity_events" ("capsule_id", "seq", "type", "at", "fields") values (?, ?, ?, ?, ?)',
  );
  const at = isoMicros(Date.now());
  sql.exec('begin');
  for (let i = 0; i < EVENTS; i++) {
    const h = createHash('sha512').update(String(i)).digest('hex');
    ins.run(
      x.id,
      i + 2,
      'StreamingEgressChunk',
      at,
      JSON.stringify({ chunk_index: i, size_bytes: 9, sha512: `sha512:${h}` }),
    );
  }
  sql.prepare('update "capsules" set "activity_seq" = ? where "id" = ?').run(EVENTS + 1, x.id);
  sql.exec('commit');
  sql.close();

  const hwmBefore = procKb(child.pid!, 'VmHWM');
  // Tenant B polls its capsule throughout the destroy.
  const latencies: number[] = [];
  const statuses: number[] = [];
  let polling = true;
  const poller = (async () => {
    while (polling) {
      const t0 = performance.now();
      const r = await api.req('GET', `/v1/capsules/${y.id}`, { key: b.key });
      latencies.push(performance.now() - t0);
      statuses.push(r.status);
      await new Promise((res) => setTimeout(res, 50));
    }
  })();
  const t0 = performance.now();
  const d = await api.req('DELETE', `/v1/capsules/${x.id}`, { key: a.key });
  const destroyMs = performance.now() - t0;
  polling = false;
  await poller;
  const hwmAfter = procKb(child.pid!, 'VmHWM');
  const grew = hwmAfter - hwmBefore;
  t.comment(
    `destroy of ${EVENTS} events: ${Math.round(destroyMs)} ms, response ${d.text.length} bytes, ` +
      `VmHWM ${Math.round(hwmBefore / 2 ** 20)} -> ${Math.round(hwmAfter / 2 ** 20)} MiB, ` +
      `tenant B: ${latencies.length} requests, max ${Math.round(Math.max(...latencies))} ms`,
  );
  t.equal(d.status, 200, 'destroyed');
  t.ok(d.text.length < 1024 * 1024, `destroy response is bounded (${d.text.length} bytes)`);
  t.ok(grew < 256 * 2 ** 20, `peak memory grew by ${Math.round(grew / 2 ** 20)} MiB (< 256 MiB)`);
  t.ok(statuses.length > 0 && statuses.every((s) => s === 200), `tenant B answered throughout (${statuses.length})`);
  t.ok(Math.max(...latencies) < 5000, 'within 5 s each (a loaded machine)');
  const cdp = d.body.cdp;
  t.equal(cdp.activity, undefined, 'a trail past the inline bound is bound by its root alone');
  t.equal(cdp.evidence[6].activity_events, EVENTS + 2, 'step 7 counts every event');
  t.equal(cdp.evidence[6].activity_inline, false, 'and says the trail is not inline');
  t.ok(verifyProof(cdp).valid, 'the record verifies');
  t.ok(verifyProof(d.body.audit_proof).valid, 'the AuditProof verifies');
  // The root is over exactly the stored trail, recomputed here from the rows.
  const rows = await dbQuery('sqlite', db, 'select * from "activity_events" where "capsule_id" = ? order by "seq"', [
    x.id,
  ]);
  const events = rows.map((r) => ({ seq: Number(r.seq), type: r.type, at: r.at, ...JSON.parse(r.fields) }));
  t.equal(activityRoot(events), cdp.activity_root, 'activity_root folds the whole trail');
  const after = await api.req('POST', `/v1/capsules/${y.id}/exec`, { key: b.key, json: { command: 'echo ok' } });
  t.equal(after.body.stdout, 'ok\n', 'the service keeps serving');
});
