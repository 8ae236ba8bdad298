// The runner obeys SIGTERM (destroys its capsules, unmounts, removes its
// cgroups, exits 0) and dies with its parent even when no parent-death signal
// reaches it (exit_with_parent: a parent-pid watch): no orphaned runner keeps
// capsule mounts.
import t, { type Test } from 'tap';
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RunnerClient } from '../../shared/node/runner-client.js';
import { cgroupNameOf, liveProcsNow, ownState, removeStateDir, RUNNER_MAIN, startRunner } from '../helpers/runner.js';
import { until } from '../helpers/until.js';

const mountsUnder = (dir: string): string[] =>
  readFileSync('/proc/self/mountinfo', 'utf8')
    .split('\n')
    .map((l) => l.split(' ')[4] ?? '')
    .filter((m) => m.startsWith(`${dir}/`));

const alive = (pid: number): boolean => {
  try {
    const st = readFileSync(`/proc/${pid}/stat`, 'utf8');
    return st[st.lastIndexOf(')') + 2] !== 'Z';
  } catch {
    return false;
  }
};

t.test('SIGTERM: capsules destroyed, mounts and cgroups gone, exit 0', async (t) => {
  const stateDir = mkdtempSync(join(tmpdir(), 'capsule-sigterm-'));
  const r = await startRunner({ stateDir });
  t.teardown(() => {
    removeStateDir(stateDir);
    r.uidBlock.release();
  });
  const a = await r.client.create({ capsule_id: 'term-a', memory_mb: 64 });
  await r.client.create({ capsule_id: 'term-b', memory_mb: 64 });
  const running = r.client
    .exec({ capsule_id: 'term-a', command: 'sleep 600', timeout_ms: 600000 })
    .catch((e: unknown) => e);
  // Polled, not a fixed pause: on a loaded machine the command can take longer than 300 ms to start.
  t.ok(await until(() => liveProcsNow(a.host_uid).length > 0, 10_000), 'a command is running');
  t.ok(mountsUnder(stateDir).length >= 3, `capsule and /etc tmpfs mounted: ${mountsUnder(stateDir).join(' ')}`);
  const memCg = readFileSync(`/proc/${r.process.pid}/cgroup`, 'utf8');
  t.match(memCg, /\/\.runner$/m, 'the runner sits in its own leaf');
  const exit = new Promise<number | null>((res) => r.process.once('exit', (code) => res(code)));
  r.process.kill('SIGTERM');
  const code = await exit;
  t.equal(code, 0, `exit 0: ${r.stderr().slice(-300)}`);
  await running;
  t.same(mountsUnder(stateDir), [], 'nothing left mounted under the state dir');
  t.same(liveProcsNow(a.host_uid), [], 'the running command was killed');
  t.notOk(existsSync(join(stateDir, 'capsules/term-a.json')), 'capsules destroyed, not left for recovery');
  const name = cgroupNameOf(stateDir);
  const memLine = memCg.split('\n').find((l) => /^\d+:([^:]*,)?memory(,[^:]*)?:/.test(l)) ?? '';
  const runnerLeaf = memLine.slice(memLine.lastIndexOf(':') + 1);
  t.ok(runnerLeaf.endsWith(`/${name}/.runner`), `runner leaf ${runnerLeaf}`);
  t.notOk(existsSync(join('/sys/fs/cgroup/memory', runnerLeaf, '..')), 'the cgroup subtree is removed');
  await r.client.close();
});

t.test('SIGTERM during start-up is obeyed once recovery is done', async (t) => {
  const { stateDir, uidBlock: uids } = ownState(t, 'capsule-sigterm-early-');
  // A capsule left by a "crash" (a mounted tmpfs holding 64 MB): its recovery wipe keeps start-up busy long enough.
  const left = join(stateDir, 'capsules', 'leftover');
  mkdirSync(left, { recursive: true });
  t.equal(spawnSync('mount', ['-t', 'tmpfs', '-o', 'size=80m', 'capsule-tmpfs', left]).status, 0);
  writeFileSync(join(left, 'big'), Buffer.alloc(64 * 1024 * 1024, 0x61));
  const child = spawn(
    process.execPath,
    [RUNNER_MAIN, `--state_dir=${stateDir}`, `--uid_base=${uids.base}`, `--uid_count=${uids.count}`],
    // No NODE_OPTIONS from the test runner: its loaders catch SIGTERM themselves.
    { stdio: ['ignore', 'pipe', 'pipe'], env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin' } },
  );
  const exit = new Promise<number | null>((res) => child.once('exit', (code) => res(code)));
  let out = '';
  child.stdout!.on('data', (b: Buffer) => {
    out += b.toString();
  });
  // Node itself catches SIGTERM from its first instant (to reset the terminal, then re-raise), so
  // wait for a sign of the runner's own start-up instead: its compiled seccomp program on disk.
  t.ok(await until(() => existsSync(join(stateDir, 'seccomp.bpf')), 20000), 'the runner is inside its start-up');
  await new Promise((r) => setTimeout(r, 20)); // into the recovery wipe
  t.notOk(out.includes('ready'), 'signalled before it was ready');
  child.kill('SIGTERM');
  let err = '';
  child.stderr!.on('data', (b: Buffer) => {
    err += b.toString();
  });
  t.equal(await exit, 0, `a clean exit, not death by the default action: ${err}`);
  t.same(mountsUnder(stateDir), [], 'nothing left mounted (the leftover was recovered before the exit)');
});

/**
 * Starts a runner (exit_with_parent=1) under the parent `spawnParent` makes from the runner's
 * argv, which must print `pid <runner pid>` and pass the runner's "ready" on; creates a capsule,
 * kills the parent with SIGKILL and checks that the runner stopped and unmounted everything.
 */
async function orphanedRunnerStopsCleanly(
  t: Test,
  name: string,
  spawnParent: (runnerArgv: string[]) => ChildProcess,
): Promise<void> {
  const { stateDir, uidBlock: uids } = ownState(t, `capsule-${name}-`);
  const socket = join(stateDir, 'runner.sock');
  const parent = spawnParent([
    RUNNER_MAIN,
    `--state_dir=${stateDir}`,
    `--socket=${socket}`,
    `--uid_base=${uids.base}`,
    `--uid_count=${uids.count}`,
    '--exit_with_parent=1',
  ]);
  let out = '';
  parent.stdout!.on('data', (b: Buffer) => {
    out += b.toString();
  });
  t.ok(await until(() => /ready/.test(out), 60000), `runner ready: ${out}`);
  const pid = Number(/pid (\d+)/.exec(out)?.[1]);
  const client = new RunnerClient(socket);
  await client.create({ capsule_id: name, memory_mb: 64 });
  t.ok(mountsUnder(stateDir).length >= 2, 'capsule tmpfs mounted');
  parent.kill('SIGKILL');
  t.ok(await until(() => !alive(pid), 10000), 'the runner exited after its parent died');
  t.same(mountsUnder(stateDir), [], 'and unmounted everything on the way out, its own /etc included');
  await client.close();
}

t.test('exit_with_parent: the runner stops when its parent dies by SIGKILL', (t) =>
  // A parent that does not pass on its death (no PR_SET_PDEATHSIG): sh, the runner in the background.
  orphanedRunnerStopsCleanly(t, 'orphan', (argv) =>
    spawn('/bin/sh', ['-c', `"$0" "$@" & echo "pid $!"; wait`, process.execPath, ...argv], {
      stdio: ['ignore', 'pipe', 'pipe'],
      env: { PATH: process.env['PATH'] ?? '/usr/bin:/bin' },
    }),
  ),
);

t.test(
  'exit_with_parent: a parent that dies with the read ends of the runner pipes (EPIPE) still gets a clean stop',
  (t) =>
    // The parent alone holds the runner's stdout and stderr: once it is killed, the
    // runner's "parent is gone" line meets a closed pipe, as under a crashed `capsule serve`.
    orphanedRunnerStopsCleanly(t, 'orphan-pipes', (argv) =>
      spawn(
        process.execPath,
        [
          '-e',
          `const { spawn } = require('node:child_process');
         const r = spawn(process.execPath, process.argv.slice(1), { stdio: ['ignore', 'pipe', 'pipe'] });
         r.stdout.on('data', (b) => { if (/ready /.test(String(b))) console.log('pid ' + r.pid + ' ready'); });
         r.stderr.resume();`,
          ...argv,
        ],
        { stdio: ['ignore', 'pipe', 'inherit'] },
      ),
    ),
);
