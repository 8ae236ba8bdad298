// The wrapper that waits for a capsule's next exec runs as the capsule's own
// host uid, with no groups and no capabilities, inside the capsule's
// cgroups, and only the runner can tell it to go (sandbox.ts, exec.ts).
import t from 'tap';
import { readdirSync, readFileSync, readlinkSync, statSync } from 'node:fs';
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

/** Polls find (started right after an answer, the processes may take a moment) for up to 2 s. */
async function waitFor(find: () => number[]): Promise<number[]> {
  let found: number[] = [];
  for (let i = 0; i < 100 && found.length === 0; i++) {
    await new Promise((res) => setTimeout(res, 20));
    found = find();
  }
  return found;
}

/** A field of /proc/<pid>/status. */
function statusOf(pid: number | undefined): (k: string) => string | undefined {
  const status = readFileSync(`/proc/${pid}/status`, 'utf8');
  return (k) => new RegExp(`^${k}:[ \\t]*(.*)$`, 'm').exec(status)?.[1]?.trim();
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

  const pids = await waitFor(() => waitingWrappers(cap.host_uid));
  t.equal(pids.length, 1, 'one wrapper waits');
  const field = statusOf(pids[0]);
  t.same(field('Uid')?.split(/\s+/), Array(4).fill(String(cap.host_uid)), 'real, effective, saved and fs uid');
  t.same(field('Gid')?.split(/\s+/), Array(4).fill(String(cap.host_uid)));
  t.equal(field('Groups'), '', 'no supplementary groups');
  for (const k of ['CapInh', 'CapPrm', 'CapEff', 'CapAmb']) t.match(field(k), /^0+$/, `${k} empty`);
  const cgroups = readFileSync(`/proc/${pids[0]}/cgroup`, 'utf8');
  t.match(cgroups, /memory[^\n]*\/wrap\n|^0::[^\n]*\/wrap\n/m, 'in the capsule memory cgroup');

  // Idle a while after its first exec, the capsule has its second exec's sandbox set up ahead.
  t.equal(
    (await waitFor(() => waitingSandboxShells(cap.host_uid))).length,
    1,
    'a set-up sandbox waits for the second exec',
  );

  // It goes only when told: the next exec runs, and it is gone afterwards (a new one waits).
  const next = await r.client.exec({ capsule_id: 'wrap', command: 'echo again', timeout_ms: 10_000 });
  t.equal(next.stdout, 'again\n');
  t.notOk(waitingWrappers(cap.host_uid).includes(pids[0]!), 'the used wrapper became the exec and ended');
  await r.client.destroy('wrap');
  t.same(waitingWrappers(cap.host_uid), [], 'none left after destroy');
});

/** Host processes of uid whose argv is the set-up sandbox's waiting shell (inside its own pid namespace). */
function waitingSandboxShells(uid: number): number[] {
  return readdirSync('/proc').flatMap((p) => {
    try {
      if (!/^\d+$/.test(p) || statSync(`/proc/${p}`).uid !== uid) return [];
      const argv = readFileSync(`/proc/${p}/cmdline`, 'utf8').split('\0');
      return argv[0] === '/bin/sh' && argv[2]?.includes('. /capsule/exec/script') ? [Number(p)] : [];
    } catch {
      return [];
    }
  });
}

/** Host processes whose argv (what `ps` shows anyone on the host) contains text: pid and pid namespace. */
function argvWith(text: string): { pid: string; pidns: string }[] {
  return readdirSync('/proc').flatMap((pid) => {
    try {
      if (!/^\d+$/.test(pid) || !readFileSync(`/proc/${pid}/cmdline`, 'utf8').includes(text)) return [];
      return [{ pid, pidns: readlinkSync(`/proc/${pid}/ns/pid`) }];
    } catch {
      return [];
    }
  });
}

t.test('a sandbox set up ahead waits confined; its exec script is in no argv and gone afterwards', async (t) => {
  const r = await startRunner();
  t.teardown(() => r.stop());
  const cap = await r.client.create({ capsule_id: 'ahead', memory_mb: 64 });
  const shells = await waitFor(() => waitingSandboxShells(cap.host_uid));
  t.equal(shells.length, 1, 'the first exec finds its sandbox set up and waiting');
  const field = statusOf(shells[0]);
  t.same(field('Uid')?.split(/\s+/), Array(4).fill(String(cap.host_uid)), 'the capsule uid on the host');
  for (const k of ['CapInh', 'CapPrm', 'CapEff', 'CapAmb']) t.match(field(k), /^0+$/, `${k} empty`);
  t.equal(field('NoNewPrivs'), '1', 'no_new_privs');
  t.equal(field('Seccomp'), '2', 'already under the seccomp filter');
  t.not(readlinkSync(`/proc/${shells[0]}/ns/pid`), readlinkSync('/proc/self/ns/pid'), 'in its own pid namespace');
  t.match(readFileSync(`/proc/${shells[0]}/cgroup`, 'utf8'), /memory[^\n]*\/ahead\n|^0::[^\n]*\/ahead\n/m);

  const secret = `s3cr3t-${process.pid}-${Date.now()}`;
  const value = `it's\n"${secret}" $HOME \\ \`x\``;
  const running = r.client.exec({
    capsule_id: 'ahead',
    command: `printf '%s|' "$V"; pwd; sleep 0.4; echo ${secret.toUpperCase()}`,
    env: { V: value },
    timeout_ms: 10_000,
  });
  await new Promise((res) => setTimeout(res, 200));
  t.same(argvWith(secret), [], 'the environment is in no host argv');
  const withCommand = argvWith(secret.toUpperCase());
  t.equal(withCommand.length, 1, "the command is only the sandboxed shell's own argv");
  t.not(withCommand[0]?.pidns, readlinkSync('/proc/self/ns/pid'), '(inside the sandbox)');
  const first = await running;
  t.equal(first.stdout, `${value}|/data\n${secret.toUpperCase()}\n`, 'value, cwd and command arrive as sent');
  const second = await r.client.exec({
    capsule_id: 'ahead',
    command: `ls -A /capsule/exec; grep -c '^export V=' /capsule/exec/script; echo "[$V]"`,
    timeout_ms: 10_000,
  });
  t.equal(second.stdout, 'script\n0\n[]\n', "only this exec's script: the first one's is gone, its env not inherited");
  // Only bubblewrap's monitor, outside the sandbox, still holds the control socket (fd 5): not its pid 1.
  const grab = await r.client.exec({
    capsule_id: 'ahead',
    command: 'ls /proc/1/fd; echo --; ls /proc/self/fd',
    timeout_ms: 10_000,
  });
  const [pid1Fds, ownFds] = grab.stdout.split('--\n').map((part) => part.split('\n').filter(Boolean));
  t.notOk(pid1Fds?.includes('5'), `pid 1 does not hold it: ${pid1Fds?.join(' ')}`);
  t.same(ownFds, ['0', '1', '2', '3'], 'the command has stdio only (3 is ls reading the directory)');
  await r.client.destroy('ahead');
  t.same(waitingSandboxShells(cap.host_uid), [], 'none left after destroy');
});
