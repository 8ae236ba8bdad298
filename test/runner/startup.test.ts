// The runner refuses to start, with a one-line reason, without root, without
// bubblewrap, or with a bad configuration.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RUNNER_MAIN } from '../helpers/runner.js';

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
