// Graceful shutdown: `capsule serve` told to stop (SIGTERM) while a command
// runs stops accepting connections at once, lets the request under way finish
// with its real answer, then exits 0 (a rolling update loses no request).
import t from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { removeStateDir, reserveUidBlock } from '../helpers/runner.js';
import { freshDb, serveProcess, testMasterKeyFile } from './harness.js';

t.test('SIGTERM drains the request under way', async (t) => {
  const db = await freshDb('sqlite');
  const dataDir = mkdtempSync(join(tmpdir(), 'cp-stop-'));
  const uids = reserveUidBlock(64);
  const runnerDir = join('/run/capsule-runner', createHash('sha256').update(dataDir).digest('hex').slice(0, 16));
  t.teardown(async () => {
    await db.drop();
    removeStateDir(runnerDir);
    removeStateDir(dataDir);
    uids.release();
  });
  const serve = await serveProcess(
    {
      PATH: process.env.PATH,
      DATABASE_URL: db.url,
      CAPSULE_MASTER_KEY_FILE: testMasterKeyFile(dataDir),
      CAPSULE_RATE_LIMITS: 'off',
      LOG_LEVEL: 'warn',
      CAPSULE_RUNNER_UID_BASE: String(uids.base),
      CAPSULE_RUNNER_UID_COUNT: String(uids.count),
      CAPSULE_RUNNER_CGROUP_NAME: `capsule-cptest-${randomBytes(6).toString('hex')}`,
    },
    dataDir,
  );
  const { api } = serve;
  const u = await api.signup();
  const c = await api.req('POST', '/v1/capsules', { key: u.key, json: {} });
  t.equal(c.status, 201);
  const exited = new Promise<number | null>((r) => serve.child.once('exit', (code) => r(code)));
  const running = api.req('POST', `/v1/capsules/${c.body.id}/exec`, {
    key: u.key,
    json: { command: 'sleep 1.5; echo finished' },
  });
  await new Promise((r) => setTimeout(r, 400));
  serve.child.kill('SIGTERM');
  await new Promise((r) => setTimeout(r, 200));
  const refused = await api.req('GET', '/v1/health').then(
    () => null,
    (e: Error & { cause?: { code?: string } }) => e.cause?.code ?? e.message,
  );
  t.equal(refused, 'ECONNREFUSED', 'no new connections once stopping');
  const r = await running;
  t.equal(r.status, 200, r.text);
  t.equal(r.body.stdout, 'finished\n', 'the command under way ran to its end and its answer arrived');
  t.equal(await exited, 0, 'then serve exited cleanly');
});
