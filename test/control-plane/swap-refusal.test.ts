// SPEC §11: `capsule serve` refuses to start on a node with active swap
// (exit 2, one line naming the areas and `swapoff -a`), and starts, with its
// runner, when the swap table lists none. A fake table stands in for /proc/swaps.
import t, { type Test } from 'tap';
import { spawn, spawnSync } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { existsSync, mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { removeStateDir, reserveUidBlock } from '../helpers/runner.js';

const CLI = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));
const HEADER = 'Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n';

function setup(t: Test, swaps: string): { env: NodeJS.ProcessEnv; dataDir: string; runnerDir: string } {
  const dataDir = mkdtempSync(join(tmpdir(), 'cp-swap-'));
  const uids = reserveUidBlock(16);
  const runnerDir = join('/run/capsule-runner', createHash('sha256').update(dataDir).digest('hex').slice(0, 16));
  t.teardown(() => {
    removeStateDir(runnerDir);
    removeStateDir(dataDir);
    uids.release();
  });
  const table = join(dataDir, 'swaps');
  writeFileSync(table, swaps);
  return {
    dataDir,
    runnerDir,
    env: {
      PATH: process.env.PATH,
      LOG_LEVEL: 'silent',
      CAPSULE_PROC_SWAPS: table,
      CAPSULE_RUNNER_UID_BASE: String(uids.base),
      CAPSULE_RUNNER_UID_COUNT: String(uids.count),
      CAPSULE_RUNNER_CGROUP_NAME: `capsule-swaptest-${randomBytes(6).toString('hex')}`,
    },
  };
}

t.test('refuses with active swap', async (t) => {
  const { env, dataDir, runnerDir } = setup(t, `${HEADER}/dev/sdb2    partition\t8388604\t0\t-2\n`);
  const r = spawnSync(process.execPath, [CLI, 'serve', '--port', '0', '--data-dir', dataDir], {
    env,
    encoding: 'utf8',
    timeout: 30_000,
  });
  t.equal(r.status, 2);
  t.equal(r.stderr.trim().split('\n').length, 1, 'one line');
  t.match(r.stderr, /^capsule serve: swap is active \(\/dev\/sdb2\): .*`swapoff -a`/);
  t.notMatch(r.stderr, /\n\s+at /, 'no stack trace');
  t.notOk(existsSync(runnerDir), 'no runner was started');
  t.notOk(existsSync(join(dataDir, 'capsule.db')), 'no database was opened');
});

t.test('a missing swap table file is a configuration error', async (t) => {
  const { env, dataDir } = setup(t, HEADER);
  const r = spawnSync(process.execPath, [CLI, 'serve', '--port', '0', '--data-dir', dataDir], {
    env: { ...env, CAPSULE_PROC_SWAPS: '/nonexistent/swaps' },
    encoding: 'utf8',
    timeout: 30_000,
  });
  t.equal(r.status, 2);
  t.match(r.stderr, /bad configuration: CAPSULE_PROC_SWAPS: no such file/);
});

t.test('starts with an empty swap table (header only), its runner too', async (t) => {
  const { env, dataDir } = setup(t, HEADER);
  const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--data-dir', dataDir], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr.on('data', (b: Buffer) => (err += b.toString()));
  const url = await new Promise<string>((resolve, reject) => {
    let out = '';
    const timer = setTimeout(() => reject(new Error(`serve not ready: ${err}`)), 60_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`serve exited ${code}: ${err}`));
    });
    child.stdout.on('data', (b: Buffer) => {
      out += b.toString();
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m?.[1]) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
  });
  const exited = new Promise<number | null>((r) => child.once('exit', r));
  t.teardown(async () => {
    if (child.exitCode === null) child.kill('SIGTERM');
    await exited;
  });
  t.equal((await fetch(`${url}/v1/health/ready`)).status, 200, 'ready, with its runner');
  t.match(err, /capsule serve: WARNING swap is read from .*\/swaps \(CAPSULE_PROC_SWAPS, tests only\)/);
  t.match(
    err,
    /capsule-runner: WARNING swap is read from .*\/swaps \(proc_swaps, tests only\)/,
    'the runner got the same table',
  );
  child.kill('SIGTERM');
  t.equal(await exited, 0, 'stops cleanly');
});
