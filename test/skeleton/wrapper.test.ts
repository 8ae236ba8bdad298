// ./capsule at the repository root: the CLI on the project's Node 24 with
// only its own output, whatever node is first on PATH (README uses it).
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const wrapper = fileURLToPath(new URL('../../../capsule', import.meta.url));
// The system prefix first, as on a machine whose own Node is older.
const env = { PATH: '/usr/bin:/bin' };

t.test('./capsule prints only its own output', async (t) => {
  const r = spawnSync(wrapper, ['--help'], { encoding: 'utf8', env });
  t.equal(r.status, 0);
  t.match(r.stdout, /^usage: capsule <command>/);
  t.equal(r.stderr, '', 'no npm warnings (EBADENGINE) or anything else');
  const bad = spawnSync(wrapper, ['no-such-command'], { encoding: 'utf8', env });
  t.equal(bad.status, 2, 'exit codes pass through');
  t.match(bad.stderr, /^capsule: unknown command "no-such-command"\n/);
});

t.test('./capsule works through a symlink from elsewhere', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'capsule-wrapper-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  symlinkSync(wrapper, join(dir, 'capsule'));
  const r = spawnSync(join(dir, 'capsule'), ['--help'], { encoding: 'utf8', env, cwd: dir });
  t.equal(r.status, 0, r.stderr);
  t.match(r.stdout, /^usage: capsule/);
});
