// Egress settings in the one config loader: CAPSULE_EGRESS_EXTRA_CA (a PEM
// file read once at start) and the proxy socket directory.
import t from 'tap';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig } from '../../control-plane/config.js';

const dir = mkdtempSync(join(tmpdir(), 'egress-cfg-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));
const PEM = '-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n';

t.test('CAPSULE_EGRESS_EXTRA_CA', async (t) => {
  const base = { CAPSULE_DATA_DIR: dir };
  t.equal(loadConfig(base).egressExtraCaPem, null, 'unset: system roots only');
  const good = join(dir, 'ca.pem');
  writeFileSync(good, PEM);
  t.equal(loadConfig({ ...base, CAPSULE_EGRESS_EXTRA_CA: good }).egressExtraCaPem, PEM, 'the file is read at start');
  t.throws(() => loadConfig({ ...base, CAPSULE_EGRESS_EXTRA_CA: join(dir, 'missing.pem') }), {
    constructor: ConfigError,
    message: /^CAPSULE_EGRESS_EXTRA_CA .*missing\.pem/,
  });
  const bad = join(dir, 'bad.pem');
  writeFileSync(bad, 'not a certificate');
  t.throws(() => loadConfig({ ...base, CAPSULE_EGRESS_EXTRA_CA: bad }), {
    constructor: ConfigError,
    message: /no PEM certificate/,
  });
});

t.test('egress socket directory', async (t) => {
  t.equal(loadConfig({ CAPSULE_DATA_DIR: dir }).egressSocketDir, join(dir, 'egress'));
  const deep = join(dir, 'a'.repeat(40), 'b'.repeat(40));
  const c = loadConfig({ CAPSULE_DATA_DIR: deep });
  t.match(c.egressSocketDir, /^\/tmp\/capsule-egress-[0-9a-f]{16}$/, 'a deep data dir falls back to a short path');
  t.equal(loadConfig({ CAPSULE_DATA_DIR: deep }).egressSocketDir, c.egressSocketDir, 'stable per data dir');
  t.equal(loadConfig({ CAPSULE_DATA_DIR: dir, CAPSULE_EGRESS_SOCKET_DIR: '/run/cx' }).egressSocketDir, '/run/cx');
  t.throws(() => loadConfig({ CAPSULE_DATA_DIR: dir, CAPSULE_EGRESS_SOCKET_DIR: `/${'x'.repeat(80)}` }), {
    constructor: ConfigError,
    message: /^CAPSULE_EGRESS_SOCKET_DIR/,
  });
});
