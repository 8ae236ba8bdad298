// The script a set-up sandbox sources for one exec (sandbox.ts execScriptText),
// run by the host's /bin/sh (dash, the same shell as inside): every byte but
// NUL survives in the environment and the command, the working directory is
// set, and nothing of the waiting shell's state leaks into the command's.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { execScriptText, type ExecScript } from '../../sandbox-runner/sandbox.js';

const dir = mkdtempSync(join(tmpdir(), 'capsule-script-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

/**
 * Sources the script as the waiting shell does (empty environment, started in /), returns stdout.
 * `env -i`: tap's spawn hook adds its own variables to any environment given to a child.
 */
function run(e: ExecScript): Buffer {
  const file = join(dir, 'script');
  writeFileSync(file, execScriptText(e));
  const r = spawnSync('/usr/bin/env', ['-i', '/bin/sh', '-c', `. ${file}`], { cwd: '/' });
  t.equal(r.status, 0, r.stderr.toString());
  return r.stdout;
}

t.test('every byte but NUL arrives as sent, in values and in the command', async (t) => {
  // Code points 1-255 (written as UTF-8, as the runner writes the script) and one beyond.
  const all = `${String.fromCharCode(...Array.from({ length: 255 }, (_, i) => i + 1))}\u{1F600}`;
  const nasty = `it's "q" $HOME \`id\` \\ \n\t'; exit 3; '${all}`;
  const out = run({
    command: `printf '%s|' "$A" "$B"; printf '%s' '${nasty.replace(/'/g, `'\\''`)}'`,
    env: { A: nasty, B: '' },
  });
  t.equal(out.toString('utf8'), `${nasty}||${nasty}`);
});

t.test('the environment is exactly what was given (and PWD), in any working directory', async (t) => {
  const env = run({ command: 'env', env: { K1: 'v1', PATH: '/usr/bin:/bin' } })
    .toString()
    .split('\n')
    .filter(Boolean)
    .sort();
  // PWD is the shell's own (a fresh sandbox's shell exported it too).
  t.same(env, ['K1=v1', 'PATH=/usr/bin:/bin', 'PWD=/']);
  const moved = run({ command: 'pwd; env', env: { K: 'v' }, cwd: dir })
    .toString()
    .split('\n')
    .filter(Boolean);
  t.equal(moved[0], dir, 'runs in cwd');
  t.same(moved.slice(1).sort(), ['K=v', `PWD=${dir}`], 'no OLDPWD from the cd');
});

t.test('a working directory that is not there ends the exec before the command', async (t) => {
  writeFileSync(join(dir, 'script'), execScriptText({ command: 'echo ran', env: {}, cwd: join(dir, 'absent') }));
  const r = spawnSync('/usr/bin/env', ['-i', '/bin/sh', '-c', `. ${join(dir, 'script')}`], { cwd: '/' });
  t.equal(r.status, 1);
  t.notMatch(r.stdout.toString(), /ran/);
});
