// The runner refuses to start, with a one-line reason, without root, without
// bubblewrap, with a bad configuration, or with active swap.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RUNNER_MAIN, startRunner } from '../helpers/runner.js';

const dir = mkdtempSync(join(tmpdir(), 'capsule-startup-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

function start(
  args: string[],
  opts: { path?: string; asUid?: number } = {},
): { status: number | null; stderr: string } {
  const base = [process.execPath, RUNNER_MAIN, `--state_dir=${dir}/s`, ...args];
  const cmd =
    opts.asUid !== undefined
      ? ['setpriv', `--reuid=${opts.asUid}`, `--regid=${opts.asUid}`, '--clear-groups', ...base]
      : base;
  const r = spawnSync(cmd[0]!, cmd.slice(1), {
    encoding: 'utf8',
    env: { PATH: opts.path ?? process.env['PATH'] ?? '/usr/bin:/bin' },
    timeout: 20000,
  });
  return { status: r.status, stderr: r.stderr };
}

t.test('refuses without root', async (t) => {
  const r = start([], { asUid: 65534 });
  t.equal(r.status, 1);
  t.match(r.stderr, /^capsule-runner: must run as root/);
  t.notMatch(r.stderr, /\n\s+at /, 'no stack trace');
});

t.test('refuses without bubblewrap', async (t) => {
  // A PATH with mount/umount and friends but no bwrap.
  const r = start([], { path: '/nonexistent' });
  t.equal(r.status, 1);
  t.match(r.stderr, /bubblewrap \(bwrap\) not found/);
});

t.test('refuses a bad configuration and names the option', async (t) => {
  let r = start(['--uid_count=abc']);
  t.equal(r.status, 1);
  t.match(r.stderr, /bad configuration: uid_count/);
  r = start(['--no_such=1']);
  t.match(r.stderr, /unknown option --no_such/);
  r = start(['--runtimes=py=relative/path']);
  t.match(r.stderr, /runtimes:/);
  r = start(['--allow_swap_for_tests=yes']);
  t.match(r.stderr, /allow_swap_for_tests: 0 or 1/);
});

// SPEC §11: no start with active swap. A fake swap table stands in for /proc/swaps.
const SWAPS_HEADER = 'Filename\t\t\t\tType\t\tSize\t\tUsed\t\tPriority\n';
const activeSwaps = join(dir, 'swaps-active');
writeFileSync(
  activeSwaps,
  `${SWAPS_HEADER}/dev/sdb2                               partition\t8388604\t\t0\t\t-2\n/swap\\040file                           file\t\t1048572\t\t0\t\t-3\n`,
);
const noSwaps = join(dir, 'swaps-none');
writeFileSync(noSwaps, SWAPS_HEADER);

t.test('refuses with active swap: exit 2, one line naming the areas and swapoff -a', async (t) => {
  const r = start([`--proc_swaps=${activeSwaps}`]);
  t.equal(r.status, 2);
  t.equal(r.stderr.trim().split('\n').length, 1, 'one line');
  t.match(r.stderr, /^capsule-runner: swap is active \(\/dev\/sdb2, \/swap file\): .*`swapoff -a`/);
  t.notMatch(r.stderr, /\n\s+at /, 'no stack trace');
  t.match(start(['--proc_swaps=/nonexistent/swaps']).stderr, /bad configuration: proc_swaps: no such file/);
});

t.test('starts with an empty swap table (header only)', async (t) => {
  const r = await startRunner({ options: { proc_swaps: noSwaps } });
  t.teardown(() => r.stop());
  t.equal((await r.client.hello()).host.swap_active, false);
  t.match(r.stderr(), /WARNING swap is read from .*swaps-none \(proc_swaps, tests only\)/);
});

t.test('allow_swap_for_tests starts with active swap and says so in host facts', async (t) => {
  const r = await startRunner({ options: { proc_swaps: activeSwaps, allow_swap_for_tests: '1' } });
  t.teardown(() => r.stop());
  t.equal((await r.client.hello()).host.swap_active, true, 'host facts state the swap');
  t.match(r.stderr(), /WARNING swap is active/);
});

t.test("the runner's file calls have 16 threads, not libuv's default 4", async (t) => {
  const r = await startRunner();
  t.teardown(() => r.stop());
  await r.client.create({ capsule_id: 'pool', memory_mb: 64 });
  await r.client.destroy('pool');
  const pid = r.process.pid!;
  const names = readdirSync(`/proc/${pid}/task`).map((tid) => {
    try {
      return readFileSync(`/proc/${pid}/task/${tid}/comm`, 'utf8').trim();
    } catch {
      return '';
    }
  });
  t.equal(names.filter((n) => n === 'libuv-worker').length, 16);
});
