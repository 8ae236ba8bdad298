import t from 'tap';
import { spawnSync } from 'node:child_process';
import { fileURLToPath } from 'node:url';

const cli = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));

t.test('unknown command exits 2 with a one-line error', async (t) => {
  const r = spawnSync(process.execPath, [cli, 'no-such-command'], { encoding: 'utf8' });
  t.equal(r.status, 2);
  t.match(r.stderr, /unknown command "no-such-command"/);
  t.notMatch(r.stderr, /\n\s+at /, 'no stack trace');
});

t.test('runs on Node 24', async (t) => {
  t.equal(Number(process.versions.node.split('.')[0]), 24);
});
