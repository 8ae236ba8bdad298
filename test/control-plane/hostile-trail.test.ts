// Hostile trails through the public API against a real sandbox runner:
// an exec printing 1 MiB of control characters is answered (cut and flagged),
// completed in the trail and counted; a capsule past its activity cap records
// one ActivityTruncated event with the totals and its proof verifies; a runner
// killed mid-exec yields a partial proof that says the command was running
// and carries the runner's recovery wipe evidence.
import t from 'tap';
import { createHash } from 'node:crypto';
import { verifyProof } from '../../shared/proof/index.js';
import { RunnerClient } from '../../shared/node/runner-client.js';
import { ReconnectingRunner } from '../../control-plane/runner/index.js';
import { startRunner } from '../helpers/runner.js';
import { DRIVERS, envelope, start } from './harness.js';

const CAP = 12;
const EXEC_ENDS = new Set(['ExecutionCompleted', 'ExecutionOomKilled', 'ExecutionFailed']);

/** Every ExecutionStarted in the trail is followed by exactly one completion. */
function openExecutions(activity: { type: string }[]): number {
  let open = 0;
  for (const e of activity) {
    if (e.type === 'ExecutionStarted') open++;
    else if (EXEC_ENDS.has(e.type)) open--;
  }
  return open;
}

for (const driver of DRIVERS) {
  t.test(`${driver}: oversized output and a capped trail lose no execution`, async (t) => {
    const runner = await startRunner();
    t.teardown(() => runner.stop());
    const s = await start(driver, runner.client, {
      CAPSULE_RATE_LIMITS: 'off',
      CAPSULE_MAX_ACTIVITY_EVENTS: String(CAP),
    });
    t.teardown(s.close);
    const { api } = s;
    const u = await api.signup();
    const c = (await api.req('POST', '/v1/capsules', { key: u.key, json: {} })).body;

    // 1 MiB of \x01 is 6 MiB once JSON-escaped: it used to come back 413 with the exec lost, then cut
    // to what fitted a runner frame's JSON header. One byte past the runner's 1 MiB bound: all of the
    // bound comes back (output travels raw in the frame body), and the cut at the bound is flagged.
    const loud = await api.req('POST', `/v1/capsules/${c.id}/exec`, {
      key: u.key,
      json: { command: "head -c 1048577 /dev/zero | tr '\\0' '\\1'; echo ran > /data/output/side" },
    });
    t.equal(loud.status, 200, `answered, not 413: ${loud.text.slice(0, 200)}`);
    t.equal(loud.body.exit_code, 0);
    t.equal(loud.body.stdout_truncated, true, 'the cut is flagged');
    t.equal(loud.body.stdout.length, 1024 * 1024, 'the whole bound is returned, none lost to escaping');
    t.equal(loud.body.stdout, '\x01'.repeat(loud.body.stdout.length), 'only what the command printed');
    const side = await api.req('GET', `/v1/capsules/${c.id}/output/side`, { key: u.key });
    t.equal(side.text, 'ran\n', 'its side effect exists');

    // Fill the trail past the cap with execs and uploads.
    let execs = 1;
    let uploads = 0;
    for (let i = 0; i < 8; i++) {
      const r = await api.req('POST', `/v1/capsules/${c.id}/exec`, { key: u.key, json: { command: 'true' } });
      t.equal(r.status, 200);
      execs++;
    }
    for (let i = 0; i < 3; i++) {
      const r = await api.req('POST', `/v1/capsules/${c.id}/upload?filename=f${i}`, { key: u.key, raw: 'x' });
      t.equal(r.status, 200);
      uploads++;
    }
    const st = (await api.req('GET', `/v1/capsules/${c.id}`, { key: u.key })).body;
    t.equal(st.execution_count, execs, 'executions are counted past the cap');

    const d = await api.req('DELETE', `/v1/capsules/${c.id}`, { key: u.key });
    t.equal(d.status, 200);
    t.equal(d.body.total_executions, execs, 'the proof response counts every exec');
    const activity: any[] = d.body.cdp.activity;
    const truncs = activity.filter((e) => e.type === 'ActivityTruncated');
    t.equal(truncs.length, 1, 'exactly one ActivityTruncated');
    const trunc = truncs[0];
    t.equal(trunc.first_dropped_type, 'ExecutionStarted', 'the first event the cap refused');
    t.match(trunc.reason, /cap/);
    // Everything asked of the trail is either stored or counted as dropped.
    // CapsuleStarted, a start and a completion per exec, uploads, the one download above.
    const asked = 1 + 2 * execs + uploads + 1;
    const stored = activity.filter((e) => e.type !== 'ActivityTruncated' && e.type !== 'DestructionInitiated');
    t.equal(stored.length + trunc.dropped_events, asked, `stored ${stored.length} + dropped ${trunc.dropped_events}`);
    t.ok(stored.length <= 2 * CAP, 'the trail stays bounded by the cap');
    t.equal(openExecutions(activity), 0, 'no ExecutionStarted without its completion');
    t.equal(activity.at(-1).type, 'DestructionInitiated', 'DestructionInitiated stays last');
    t.equal(activity.at(-2).type, 'ActivityTruncated', 'the truncation is recorded at destroy, before it');
    const completed = activity.find((e) => e.type === 'ExecutionCompleted');
    t.equal(completed.stdout_truncated, true, 'the trail says the output hash is over a cut stream');
    const sha = (text: string): string => `sha512:${createHash('sha512').update(text, 'utf8').digest('hex')}`;
    t.equal(completed.stdout_hash, sha(loud.body.stdout), 'and it is the hash of the stdout answered');
    t.equal(completed.stderr_hash, sha(loud.body.stderr));
    const v = verifyProof(d.body.cdp);
    t.ok(v.valid, `record verifies: ${JSON.stringify(v)}`);
    t.ok(verifyProof(d.body.audit_proof).valid, 'AuditProof verifies');
    const stored2 = await api.req('GET', `/v1/proofs/${c.id}`, { key: u.key });
    t.equal(stored2.body.cdp.activity_root, d.body.cdp.activity_root, 'stored proof is the one answered');
  });
}

t.test(
  'sqlite: runner killed mid-exec: partial proof says the command was running, with the recovery wipe',
  async (t) => {
    const r1 = await startRunner();
    let current = r1;
    t.teardown(() => current.stop());
    const runner = new ReconnectingRunner(() => new RunnerClient(r1.socketPath));
    const s = await start('sqlite', runner, { CAPSULE_RATE_LIMITS: 'off' });
    t.teardown(s.close);
    runner.onReconnect(() => s.cp.services.recovery.reset());
    const { api } = s;
    const u = await api.signup();
    const c = (await api.req('POST', '/v1/capsules', { key: u.key, json: {} })).body;
    await api.req('POST', `/v1/capsules/${c.id}/upload?filename=secret.txt`, { key: u.key, raw: 'regulated bytes' });
    const running = api.req('POST', `/v1/capsules/${c.id}/exec`, { key: u.key, json: { command: 'sleep 30' } });
    await new Promise((r) => setTimeout(r, 800));
    r1.process.kill('SIGKILL');
    const lost = await running;
    envelope(t, lost, 503, 'service_unavailable');

    // The runner restarts on its state: it wipes what the crash left and reports it in hello.
    const r2 = await startRunner({ stateDir: r1.stateDir, uidBlock: r1.uidBlock });
    current = r2;
    await r1.client.close();
    // The first call reconnects (recovery is reset); the next one reconciles.
    await api.req('POST', '/v1/capsules', { key: u.key, json: {} });
    envelope(
      t,
      await api.req('POST', `/v1/capsules/${c.id}/exec`, { key: u.key, json: { command: 'true' } }),
      410,
      'capsule_expired',
    );
    const st = (await api.req('GET', `/v1/capsules/${c.id}`, { key: u.key })).body;
    t.equal(st.status, 'expired_unclean');
    const p = await api.req('GET', `/v1/proofs/${c.id}`, { key: u.key });
    t.equal(p.status, 200);
    const cdp = p.body.cdp;
    t.equal(cdp.completeness, 'partial');
    t.equal(cdp.termination.command_was_running, true, 'the trail ended in an unfinished ExecutionStarted');
    t.equal(cdp.termination.command_completed, false);
    const rec = cdp.evidence.find((e: any) => e.runner_recovery)?.runner_recovery;
    t.ok(rec, `the recovery wipe is in the evidence: ${JSON.stringify(cdp.evidence)}`);
    t.ok(rec.wipe && rec.wipe.bytes_overwritten >= 'regulated bytes'.length, 'as the runner measured it');
    const ev = cdp.activity.find((e: any) => e.type === 'RunnerRecoveryWipe');
    t.ok(ev, 'and bound into the trail (signed through activity_root)');
    t.same(ev.wipe, rec.wipe);
    const v = verifyProof(cdp);
    t.ok(v.valid, 'partial record verifies');
  },
);
