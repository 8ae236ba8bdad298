// Declared packages and version pins: each ecosystem's syntax, pins against
// installed versions, and the base-image check at Capsulefile create, update
// and finalize (not only at capsule create), over real HTTP on SQLite and
// PostgreSQL with a base-image inventory this test controls.
import t from 'tap';
import { chmodSync, mkdirSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parsePackageSpec, satisfies } from '../../control-plane/capsulefile/index.js';
import { HostBaseImage } from '../../control-plane/base-image/index.js';
import { startRunner } from '../helpers/runner.js';
import { DRIVERS, envelope, freshDb, start } from '../control-plane/harness.js';

t.test('package declarations in each ecosystem syntax', async (t) => {
  t.same(parsePackageSpec('apt', 'libssl3=3.0.11-1~deb12u2'), {
    name: 'libssl3',
    constraints: [{ op: '=', version: '3.0.11-1~deb12u2' }],
  });
  t.same(parsePackageSpec('apt', 'python3'), { name: 'python3', constraints: [] });
  t.same(parsePackageSpec('pip', 'requests>=2.0,<3'), {
    name: 'requests',
    constraints: [
      { op: '>=', version: '2.0' },
      { op: '<', version: '3' },
    ],
  });
  t.same(parsePackageSpec('pip', 'Foo_Bar==1.2.*'), { name: 'Foo_Bar', constraints: [{ op: '==', version: '1.2.*' }] });
  t.same(parsePackageSpec('npm', '@scope/pkg@1.2.3-rc.1'), {
    name: '@scope/pkg',
    constraints: [{ op: '=', version: '1.2.3-rc.1' }],
  });
  t.same(parsePackageSpec('npm', 'left-pad'), { name: 'left-pad', constraints: [] });
  for (const [eco, bad] of [
    ['apt', 'Python3'],
    ['apt', 'python3==3'],
    ['pip', 'requests; rm -rf /'],
    ['pip', 'requests>=1.*'],
    ['pip', 'requests =='],
    ['npm', 'left-pad@^1.0.0'],
    ['npm', 'left-pad==1.0.0'],
  ] as const)
    t.ok('problem' in parsePackageSpec(eco, bad), `${eco} refuses ${bad}`);
});

t.test('pins against installed versions', async (t) => {
  const pip = (installed: string, spec: string): boolean => {
    const p = parsePackageSpec('pip', `x${spec}`);
    if ('problem' in p) throw new Error(p.problem);
    return satisfies('pip', installed, p.constraints);
  };
  t.ok(pip('2.28.1', '>=2.0'));
  t.ok(pip('2.28.1', '>=2.0,<3'));
  t.notOk(pip('2.28.1', '>=3'));
  t.ok(pip('6.0', '==6'), '6.0 == 6 (zero padding)');
  t.ok(pip('6.0.1', '==6.0.*'));
  t.notOk(pip('6.1', '==6.0.*'));
  t.ok(pip('6.1', '!=6.0.*'));
  t.ok(pip('1.4.5', '~=1.4.2'));
  t.notOk(pip('1.5.0', '~=1.4.2'));
  t.ok(pip('2.0rc1', '<2.0'), 'a release candidate precedes its release');
  t.ok(pip('2.0.post1', '>2.0'), 'a post release follows it');
  t.notOk(pip('2.0.dev3', '>=2.0'));
  t.ok(pip('1.0', '===1.0'));
  t.notOk(pip('1.0.0', '===1.0'), '=== compares the text');
  t.ok(satisfies('apt', '5.2.15-2+b8', [{ op: '=', version: '5.2.15-2+b8' }]));
  t.notOk(satisfies('npm', '1.3.0', [{ op: '=', version: '1.3.1' }]));
});

/** A base image this test controls: a dpkg status file, a stand-in python3, a global node_modules. */
function image(apt: Record<string, string>, pip: Record<string, string>, npm: Record<string, string>) {
  const dir = mkdtempSync(join(tmpdir(), 'cf-image-'));
  writeFileSync(
    join(dir, 'status'),
    Object.entries(apt)
      .map(([n, v]) => `Package: ${n}\nStatus: install ok installed\nVersion: ${v}\n`)
      .join('\n'),
  );
  const py = join(dir, 'python3');
  writeFileSync(py, `#!/bin/sh\necho '${JSON.stringify(Object.entries(pip))}'\n`);
  chmodSync(py, 0o755);
  for (const [n, v] of Object.entries(npm)) {
    mkdirSync(join(dir, 'node_modules', n), { recursive: true });
    writeFileSync(join(dir, 'node_modules', n, 'package.json'), JSON.stringify({ name: n, version: v }));
  }
  return {
    baseImage: new HostBaseImage({
      dpkgStatus: join(dir, 'status'),
      python: py,
      nodeModules: [join(dir, 'node_modules')],
    }),
    remove: () => rmSync(dir, { recursive: true, force: true }),
  };
}

for (const driver of DRIVERS) {
  t.test(`${driver}: packages are checked when the Capsulefile is written, not first at capsule create`, async (t) => {
    const runner = await startRunner();
    t.teardown(() => runner.stop());
    const db = await freshDb(driver);
    t.teardown(() => db.drop());
    const before = image(
      { foo: '1.2-1', bar: '2.0' },
      { PyYAML: '6.0', requests: '2.28.1' },
      { 'left-pad': '1.3.0', '@scope/pkg': '2.0.0' },
    );
    t.teardown(before.remove);
    let s = await start(driver, runner.client, { CAPSULE_RATE_LIMITS: 'off' }, db, { baseImage: before.baseImage });
    const { key } = await s.api.signup();
    const def = (name: string, packages: unknown) => ({ name, runtime: 'python3', entrypoint: 'true', packages });

    const ok = await s.api.req('POST', '/v1/capsulefiles', {
      key,
      json: def('pinned', {
        apt: ['foo=1.2-1', 'bar'],
        pip: ['pyyaml>=5,<7', 'Requests==2.28.*'],
        npm: ['left-pad@1.3.0', '@scope/pkg'],
      }),
    });
    t.equal(ok.status, 201, ok.text);

    for (const [packages, text] of [
      [{ apt: ['foo=9'] }, 'apt:foo=9 (installed 1.2-1)'],
      [{ apt: ['nope'] }, 'apt:nope'],
      [{ pip: ['PyYAML>=99'] }, 'pip:PyYAML>=99 (installed 6.0)'],
      [{ pip: ['numpy'] }, 'pip:numpy'],
      [{ npm: ['left-pad@2.0.0'] }, 'npm:left-pad@2.0.0 (installed 1.3.0)'],
    ] as const) {
      const r = await s.api.req('POST', '/v1/capsulefiles', { key, json: def('refused', packages) });
      const e = envelope(t, r, 400, 'invalid_parameters');
      t.equal(e.field, 'packages');
      t.ok(e.message.includes(`declared package ${text} is not in the base image`), e.message);
    }
    const syntax = await s.api.req('POST', '/v1/capsulefiles', { key, json: def('refused', { npm: ['left-pad@^1'] }) });
    t.equal(envelope(t, syntax, 400, 'invalid_parameters').field, 'packages.npm.0');

    const draft = await s.api.req('POST', '/v1/capsulefiles', { key, json: def('draft', { apt: ['bar'] }) });
    const patch = await s.api.req('PATCH', `/v1/capsulefiles/${draft.body.id}`, {
      key,
      json: { packages: { apt: ['bar=3.0'] } },
    });
    t.match(envelope(t, patch, 400, 'invalid_parameters').message, /apt:bar=3\.0 \(installed 2\.0\)/);
    const kept = await s.api.req('GET', `/v1/capsulefiles/${draft.body.id}`, { key });
    t.same(kept.body.packages, { apt: ['bar'] }, 'the refused update changed nothing');
    const fin = await s.api.req('POST', '/v1/capsulefiles', { key, json: def('final', { apt: ['foo=1.2-1'] }) });
    t.equal((await s.api.req('POST', `/v1/capsulefiles/${fin.body.id}/finalize`, { key })).status, 200);

    // The image changes (an upgrade between restarts): finalize and capsule create check again.
    await s.close();
    const after = image({ foo: '1.3-1' }, {}, {});
    t.teardown(after.remove);
    s = await start(driver, runner.client, { CAPSULE_RATE_LIMITS: 'off' }, db, { baseImage: after.baseImage });
    t.teardown(() => s.close());
    const f = await s.api.req('POST', `/v1/capsulefiles/${draft.body.id}/finalize`, { key });
    t.match(envelope(t, f, 400, 'invalid_parameters').message, /^packages: declared package apt:bar is not/);
    t.equal((await s.api.req('GET', `/v1/capsulefiles/${draft.body.id}`, { key })).body.status, 'draft');
    const c = await s.api.req('POST', '/v1/capsules', { key, json: { capsulefile_id: fin.body.id } });
    const e = envelope(t, c, 400, 'invalid_parameters');
    t.equal(e.field, 'capsulefile_id');
    t.match(e.message, /apt:foo=1\.2-1 \(installed 1\.3-1\)/);
    t.same(await runner.client.list(), [], 'nothing reached the runner');
  });
}
