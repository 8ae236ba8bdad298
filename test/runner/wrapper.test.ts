// The wrapper that waits for a capsule's next exec runs as the capsule's own
// host uid, with no groups and no capabilities, inside the capsule's
// cgroups, and only the runner can tell it to go (sandbox.ts, exec.ts).
import t from 'tap';
import { readdirSync, readFileSync } from 'node:fs';
import { isWaitingWrapper, startRunner } from '../helpers/runner.js';

/** The runner's waiting wrappers running as a capsule's uid. */
function waitingWrappers(uid: number): number[] {
  return readdirSync('/proc')
    .filter((p) => /^\d+$/.test(p) && isWaitingWrapper(p))
    .filter((p) => {
      try {
        return new RegExp(`^Uid:\\s+${uid}\\s`, 'm').test(readFileSync(`/proc/${p}/status`, 'utf8'));
      } catch {
        return false;
      }
    })
    .map(Number);
}

t.test('the waiting wrapper runs as the capsule uid, unprivileged, in the capsule cgroups', async (t) => {
  const r = await startRunner();
  t.teardown(() => r.stop());
  const cap = await r.client.create({ capsule_id: 'wrap', memory_mb: 64 });
  const first = await r.client.exec({
    capsule_id: 'wrap',
    command: 'id -u; cat /proc/self/status',
    timeout_ms: 10_000,
  });
  t.equal(first.stdout.split('\n')[0], '1000', 'uid 1000 inside');
  t.match(first.stdout, /NoNewPrivs:\s+1/, 'no_new_privs inside (set by bwrap)');
  t.match(first.stdout, /CapEff:\s+0+\n/, 'no capabilities inside');

  // The next exec's wrapper is started right after the answer; give it a moment.
  let pids: number[] = [];
  for (let i = 0; i < 50 && pids.length === 0; i++) {
    await new Promise((res) => setTimeout(res, 20));
    pids = waitingWrappers(cap.host_uid);
  }
  t.equal(pids.length, 1, 'one wrapper waits');
  const status = readFileSync(`/proc/${pids[0]}/status`, 'utf8');
  const field = (k: string) => new RegExp(`^${k}:[ \\t]*(.*)$`, 'm').exec(status)?.[1]?.trim();
  t.same(field('Uid')?.split(/\s+/), Array(4).fill(String(cap.host_uid)), 'real, effective, saved and fs uid');
  t.same(field('Gid')?.split(/\s+/), Array(4).fill(String(cap.host_uid)));
  t.equal(field('Groups'), '', 'no supplementary groups');
  for (const k of ['CapInh', 'CapPrm', 'CapEff', 'CapAmb']) t.match(field(k), /^0+$/, `${k} empty`);
  const cgroups = readFileSync(`/proc/${pids[0]}/cgroup`, 'utf8');
  t.match(cgroups, /memory[^\n]*\/wrap\n|^0::[^\n]*\/wrap\n/m, 'in the capsule memory cgroup');

  // It goes only when told: the next exec runs, and it is gone afterwards (a new one waits).
  const next = await r.client.exec({ capsule_id: 'wrap', command: 'echo again', timeout_ms: 10_000 });
  t.equal(next.stdout, 'again\n');
  t.notOk(waitingWrappers(cap.host_uid).includes(pids[0]!), 'the used wrapper became the exec and ended');
  await r.client.destroy('wrap');
  t.same(waitingWrappers(cap.host_uid), [], 'none left after destroy');
});
