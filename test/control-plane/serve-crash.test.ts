// `capsule serve` as an operator runs it (spawning its own runner), killed
// with SIGKILL mid-session: the restart marks the capsules expired_unclean
// with signed partial proofs and loses no stored proof. SQLite and PostgreSQL.
import t from 'tap';
import { spawnSync, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { verifyProof } from '../../shared/proof/index.js';
import { removeStateDir, reserveUidBlock } from '../helpers/runner.js';
import { DRIVERS, envelope, freshDb, testMasterKeyFile, serveProcess } from './harness.js';

const CLI = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));

const exited = (c: ChildProcess): Promise<void> =>
  new Promise((r) => {
    if (c.exitCode !== null || c.signalCode !== null) r();
    else c.once('exit', () => r());
  });

for (const driver of DRIVERS) {
  t.test(`${driver}: SIGKILL mid-session, restart, expired_unclean with partial proofs`, async (t) => {
    const db = await freshDb(driver);
    const dataDir = mkdtempSync(join(tmpdir(), 'cp-serve-'));
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
      LOG_LEVEL: 'info',
      CAPSULE_RATE_LIMITS: 'off',
      CAPSULE_RUNNER_UID_BASE: String(uids.base),
      CAPSULE_RUNNER_UID_COUNT: String(uids.count),
      CAPSULE_RUNNER_CGROUP_NAME: `capsule-cptest-${randomBytes(6).toString('hex')}`,
    };

    const first = await serveProcess(env, dataDir);
    const { api } = first;
    t.equal((await api.req('GET', '/v1/health/ready')).status, 200, 'ready with its own runner');
    const u = await api.signup();
    const done = (await api.req('POST', '/v1/capsules', { key: u.key, json: {} })).body;
    const hi = await api.req('POST', `/v1/capsules/${done.id}/exec`, { key: u.key, json: { command: 'echo hi' } });
    t.equal(hi.body.exit_code, 0, `a command runs under serve's own runner: ${hi.text}`);
    t.equal(hi.body.stdout, 'hi\n');
    const destroyed = await api.req('DELETE', `/v1/capsules/${done.id}`, { key: u.key });
    t.equal(destroyed.status, 200);
    const idle = (await api.req('POST', '/v1/capsules', { key: u.key, json: { data_classification: 'PHI' } })).body;
    await api.req('POST', `/v1/capsules/${idle.id}/upload?filename=a.txt`, { key: u.key, raw: 'data' });
    const busy = (await api.req('POST', '/v1/capsules', { key: u.key, json: {} })).body;
    // Logs: the trace id is propagated; keys and customer bytes never appear.
    const secret = 'very-secret-input-bytes-4711';
    const traced = await api.req('POST', `/v1/capsules/${idle.id}/exec`, {
      key: u.key,
      json: { command: 'cat /data/input/data >/dev/null', input_data: secret },
      headers: { 'x-svc-trace-id': 'trace-abc-123' },
    });
    t.equal(traced.status, 200);
    await new Promise((r) => setTimeout(r, 300));
    const lines = first
      .stdout()
      .split('\n')
      .filter((l) => l.startsWith('{'))
      .map((l) => JSON.parse(l));
    const line = lines.find((l) => l.trace_id === 'trace-abc-123');
    t.ok(line, 'a log line carries the trace id');
    t.equal(line?.request_id, traced.headers.get('x-svc-request-id'), 'and the request id');
    t.notOk(first.stdout().includes(u.key), 'no API key in logs');
    t.notOk(first.stdout().includes(secret), 'no input bytes in logs');
    t.notOk(first.stdout().includes(u.email), 'no email in logs');
    // A command is running when the server dies.
    const running = api
      .req('POST', `/v1/capsules/${busy.id}/exec`, { key: u.key, json: { command: 'sleep 30' } })
      .catch(() => null);
    await new Promise((r) => setTimeout(r, 500));
    first.child.kill('SIGKILL');
    await exited(first.child);
    await running;

    const second = await serveProcess(env, dataDir);
    t.teardown(async () => {
      second.child.kill('SIGTERM');
      await exited(second.child);
    });
    const api2 = second.api;
    for (const c of [idle, busy]) {
      const st = await api2.req('GET', `/v1/capsules/${c.id}`, { key: u.key });
      t.equal(st.body.status, 'expired_unclean', `${c.id} expired_unclean`);
      envelope(
        t,
        await api2.req('POST', `/v1/capsules/${c.id}/exec`, { key: u.key, json: { command: 'true' } }),
        410,
        'capsule_expired',
      );
      const p = await api2.req('GET', `/v1/proofs/${c.id}`, { key: u.key });
      t.equal(p.status, 200);
      const cdp = p.body.cdp;
      t.equal(cdp.completeness, 'partial');
      t.equal(cdp.reason, 'capsule_state_lost_on_restart');
      t.same(cdp.chain, []);
      t.equal(cdp.termination.trigger, 'system_restart');
      t.same(
        cdp.termination,
        c === busy
          ? { trigger: 'system_restart', command_was_running: true, command_completed: false }
          : { trigger: 'system_restart', command_was_running: false },
        'a command in flight at the crash is stated',
      );
      t.ok(cdp.attestation, 'signed');
      const v = verifyProof(cdp);
      t.equal(v.valid, true, JSON.stringify(v));
      if (v.valid) t.equal(v.completeness, 'partial');
      t.equal(
        (await api2.req('GET', `/v1/keys/${cdp.attestation.key_id}`)).status,
        200,
        'partial proof key registered',
      );
      const file = join(dataDir, `${c.id}.json`);
      writeFileSync(file, JSON.stringify(cdp));
      const cv = spawnSync(process.execPath, [CLI, 'verify', file], { encoding: 'utf8' });
      t.equal(cv.status, 0, `capsule verify accepts the partial proof: ${cv.stdout}${cv.stderr}`);
    }
    const idleProof = (await api2.req('GET', `/v1/proofs/${idle.id}`, { key: u.key })).body.cdp;
    t.same(
      idleProof.activity.map((e: any) => e.type),
      ['CapsuleStarted', 'FileUploaded', 'ExecutionStarted', 'ExecutionCompleted'],
      'the trail recorded before the crash is kept',
    );
    const kept = await api2.req('GET', `/v1/proofs/${done.id}`, { key: u.key });
    t.same(kept.body.cdp, destroyed.body.cdp, 'the proof stored before the crash is intact');
    const me = await api2.req('GET', '/v1/customers/me', { key: u.key });
    t.equal(me.body.usage.cdps_this_cycle, 3);
    t.equal(
      (await api2.req('POST', '/v1/capsules', { key: u.key, json: {} })).status,
      201,
      'live slots were given back',
    );
    t.equal((await api2.req('GET', '/v1/health/ready')).status, 200);
    second.child.kill('SIGTERM');
    await exited(second.child);
    t.equal(second.child.exitCode, 0, `graceful stop: ${second.stderr().slice(-500)}`);
  });
}
