// Envelope encryption of secrets at rest and the master key file rules.
import t from 'tap';
import { randomBytes } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ConfigError, loadConfig, requireMasterKey } from '../../control-plane/config.js';
import { EnvelopeBox, SecretBoxError } from '../../control-plane/secrets/envelope.js';
import { loadMasterKey, parseMasterKey } from '../../control-plane/secrets/master-key.js';

const silent = { warn: () => undefined };

t.test('seal/open round trip, fresh randomness each time, bound to its context', async (t) => {
  const box = new EnvelopeBox(randomBytes(32));
  const a = box.sealString('whsec_secret', 'webhook:whse_1:signing_secret');
  const b = box.sealString('whsec_secret', 'webhook:whse_1:signing_secret');
  t.not(a, b, 'two seals of one value differ (random data key and IVs)');
  t.notMatch(a, /whsec_secret/, 'plaintext is not in the sealed form');
  t.equal(box.openString(a, 'webhook:whse_1:signing_secret'), 'whsec_secret');
  t.throws(() => box.openString(a, 'webhook:whse_2:signing_secret'), SecretBoxError, 'moved to another row');
});

t.test('a wrong master key, a tampered part or a malformed value fail', async (t) => {
  const box = new EnvelopeBox(randomBytes(32));
  const sealed = box.sealString('x'.repeat(100), 'ctx');
  t.throws(() => new EnvelopeBox(randomBytes(32)).openString(sealed, 'ctx'), /another master key/);
  const parts = sealed.split('.');
  for (const i of [2, 3]) {
    const bytes = Buffer.from(parts[i]!, 'base64url');
    bytes[bytes.length - 20]! ^= 1;
    const tampered = [...parts];
    tampered[i] = bytes.toString('base64url');
    t.throws(() => box.openString(tampered.join('.'), 'ctx'), SecretBoxError, `part ${i} tampered`);
  }
  t.throws(() => box.openString('plain', 'ctx'), /not a sealed value/);
  t.throws(() => box.openString('env1.x.y', 'ctx'), /not a sealed value/);
  t.throws(() => new EnvelopeBox(randomBytes(16)), /32 bytes/);
});

t.test('after destroy the box opens nothing it sealed', async (t) => {
  const box = new EnvelopeBox(randomBytes(32));
  const sealed = box.sealString('s', 'ctx');
  box.destroy();
  t.throws(() => box.openString(sealed, 'ctx'), SecretBoxError);
});

t.test('master key file: base64 or hex of 32 bytes, nothing else', async (t) => {
  const key = randomBytes(32);
  t.same(parseMasterKey(key.toString('base64'), 'f'), key);
  t.same(parseMasterKey(`${key.toString('hex')}\n`, 'f'), key);
  for (const bad of ['', 'short', randomBytes(16).toString('base64'), randomBytes(33).toString('hex')])
    t.throws(() => parseMasterKey(bad, 'f'), ConfigError, JSON.stringify(bad));
});

t.test('embedded default generates a 0600 key once; PostgreSQL needs an operator key', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'mk-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const sqlite = loadConfig({ CAPSULE_DATA_DIR: dir });
  t.same(sqlite.masterKey, { file: join(dir, 'master.key'), generateIfMissing: true });
  const warned: string[] = [];
  const first = loadMasterKey(requireMasterKey(sqlite), { warn: (_o, m) => warned.push(m) });
  t.equal(statSync(join(dir, 'master.key')).mode & 0o777, 0o600);
  t.equal(warned.length, 1, 'the generation is logged');
  t.notMatch(warned[0]!, new RegExp(first.toString('base64').slice(0, 12)), 'the key is not in the log');
  const again = loadMasterKey(requireMasterKey(sqlite), silent);
  t.same(again, first, 'a second start reads the same key, never overwrites it');

  const pgConfig = loadConfig({ CAPSULE_DATA_DIR: dir, DATABASE_URL: 'postgres://x@127.0.0.1/db' });
  t.equal(pgConfig.masterKey, null);
  t.throws(() => requireMasterKey(pgConfig), /CAPSULE_MASTER_KEY_FILE: required with PostgreSQL/);
  const file = join(dir, 'op.key');
  writeFileSync(file, randomBytes(32).toString('hex'), { mode: 0o400 });
  const op = loadConfig({
    CAPSULE_DATA_DIR: dir,
    DATABASE_URL: 'postgres://x@127.0.0.1/db',
    CAPSULE_MASTER_KEY_FILE: file,
  });
  t.same(loadMasterKey(requireMasterKey(op), silent), Buffer.from(readFileSync(file, 'utf8'), 'hex'));
  t.throws(() => loadConfig({ CAPSULE_DATA_DIR: dir, CAPSULE_MASTER_KEY: 'abc' }), /not accepted inline/);
  t.throws(
    () => loadMasterKey({ file: join(dir, 'missing.key'), generateIfMissing: false }, silent),
    /CAPSULE_MASTER_KEY_FILE/,
  );
  // A first start with a data directory that does not exist yet: created (0700), key generated in it.
  const fresh = join(dir, 'not-yet', 'data');
  const created = loadMasterKey(requireMasterKey(loadConfig({ CAPSULE_DATA_DIR: fresh })), silent);
  t.equal(created.length, 32);
  t.equal(statSync(fresh).mode & 0o777, 0o700, 'the data directory is private');
  t.equal(statSync(join(fresh, 'master.key')).mode & 0o777, 0o600);
});
