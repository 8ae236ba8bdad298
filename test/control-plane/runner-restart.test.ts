// `capsule serve` with its own runner: when that runner dies (SIGKILL), serve
// keeps answering (ready 503 and capsule calls 503 with Retry-After only while
// it is down), restarts it with backoff, and the capsules the dead runner held
// become expired_unclean with signed partial proofs carrying the recovery
// evidence. When serve itself dies by SIGKILL, its runner goes with it and
// leaves no capsule mounted. SQLite and PostgreSQL.
import t from 'tap';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { verifyProof } from '../../shared/proof/index.js';
import { removeStateDir, reserveUidBlock } from '../helpers/runner.js';
import { DRIVERS, freshDb, testMasterKeyFile, serveProcess, type ServeProcess } from './harness.js';

const alive = (pid: number): boolean => {
  try {
    const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return st[st.lastIndexOf(')') + 2] !== 'Z';
  } catch {
    return false;
  }
};

const mountsUnder = (dir: string): string[] =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((m) => m.startsWith(`${dir}/`));

const sleep = (ms: number): Promise<void> => new Promise((r) => setTimeout(r, ms));

for (const driver of DRIVERS) {
  t.test(`${driver}: the local runner dies and is restarted; serve dies and takes its runner`, async (t) => {
    const db = await freshDb(driver);
    const dataDir = mkdtempSync(join(tmpdir(), 'cp-restart-'));
    const uids = reserveUidBlock(64);
    const runnerDir = join('/run/capsule-runner', createHash('sha256').update(dataDir).digest('hex').slice(0, 16));
    let s: ServeProcess | null = null;
    t.teardown(async () => {
      if (s && s.child.exitCode === null && s.child.signalCode === null) {
        s.child.kill('SIGTERM');
        await new Promise((r) => s!.child.once('exit', r));
      }
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
      CAPSULE_RUNNER_CGROUP_NAME: `capsule-rstest-${randomBytes(6).toString('hex')}`,
    };
    s = await serveProcess(env, dataDir);
    const { api } = s;
    t.equal((await api.req('GET', '/v1/health/ready')).status, 200);
    const u = await api.signup();
    const held = (await api.req('POST', '/v1/capsules', { key: u.key, json: { data_classification: 'PHI' } })).body;
    await api.req('POST', `/v1/capsules/${held.id}/upload?filename=a.txt`, { key: u.key, raw: 'secret data' });
    const ex = await api.req('POST', `/v1/capsules/${held.id}/exec`, {
      key: u.key,
      json: { command: 'cp /data/input/a.txt /data/output/b.txt' },
    });
    t.equal(ex.body.exit_code, 0, ex.text);

    // Kill the runner (not serve).
    const pid1 = Number(readFileSync(join(runnerDir, 'runner.pid'), 'utf8'));
    t.ok(alive(pid1), 'the local runner runs');
    process.kill(pid1, 'SIGKILL');
    const downAt = Date.now();
    let saw503 = false;
    let sawRetryAfter = false;
    let back = false;
    while (Date.now() - downAt < 90_000) {
      const r = await api.req('GET', '/v1/health/ready');
      if (r.status === 503) {
        saw503 = true;
        const c = await api.req('POST', '/v1/capsules', { key: u.key, json: {} });
        if (c.status === 503 && Number(c.headers.get('retry-after')) > 0) sawRetryAfter = true;
      } else if (r.status === 200) {
        if (saw503) {
          back = true;
          break;
        }
      }
      await sleep(100);
    }
    t.ok(saw503, 'ready is 503 while the runner is down');
    t.ok(sawRetryAfter, 'a create while it is down is 503 with Retry-After');
    t.ok(back, `ready is 200 again once it is back (${Date.now() - downAt} ms): ${s.stderr().slice(-400)}`);
    t.equal(s.child.exitCode, null, 'serve kept running');
    t.match(s.stderr(), /the local runner exited \(SIGKILL\); restarting it in \d+ ms/);
    const pid2 = Number(readFileSync(join(runnerDir, 'runner.pid'), 'utf8'));
    t.not(pid2, pid1, 'a new runner');
    t.ok(alive(pid2));
    // Every later ready is 200 (no spurious 503 from a stale connection).
    for (let i = 0; i < 5; i++) t.equal((await api.req('GET', '/v1/health/ready')).status, 200);

    // The capsule the dead runner held: expired_unclean, signed partial proof.
    const st = await api.req('GET', `/v1/capsules/${held.id}`, { key: u.key });
    t.equal(st.body.status, 'expired_unclean', st.text);
    const p = await api.req('GET', `/v1/proofs/${held.id}`, { key: u.key });
    t.equal(p.status, 200);
    t.equal(p.body.cdp.completeness, 'partial');
    t.equal(verifyProof(p.body.cdp).valid, true);
    // Service continues: a new capsule works on the restarted runner.
    const fresh = await api.req('POST', '/v1/capsules', { key: u.key, json: {} });
    t.equal(fresh.status, 201, fresh.text);
    const hi = await api.req('POST', `/v1/capsules/${fresh.body.id}/exec`, {
      key: u.key,
      json: { command: 'echo hi' },
    });
    t.equal(hi.body.stdout, 'hi\n');
    t.ok(mountsUnder(runnerDir).length >= 2, 'the fresh capsule and /etc tmpfs are mounted');

    // serve dies by SIGKILL: its runner follows and unmounts everything.
    s.child.kill('SIGKILL');
    await new Promise((r) => s!.child.once('exit', r));
    const end = Date.now() + 20_000;
    while (alive(pid2) && Date.now() < end) await sleep(100);
    t.notOk(alive(pid2), 'the runner did not outlive serve');
    t.same(mountsUnder(runnerDir), [], 'no capsule mount left behind');
    t.notOk(existsSync(join(runnerDir, 'state/capsules', `${fresh.body.id}.json`)), 'its capsule was destroyed');
  });
}
