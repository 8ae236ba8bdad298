// The managed signer on real key files: settings validation, the signing
// version rule, unavailability, rotation without restart, zeroize on close.
import t from 'tap';
import { generateKeyPairSync } from 'node:crypto';
import { mkdtempSync, rmSync, unlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig, ConfigError } from '../../control-plane/config.js';
import { FileSigner } from '../../control-plane/signing/index.js';

const NOW = () => '2026-11-23T22:00:00.000000Z';

function keyFile(path: string, type: 'ed25519' | 'x25519' = 'ed25519'): void {
  const { privateKey } = generateKeyPairSync(type as 'ed25519');
  writeFileSync(path, privateKey.export({ format: 'pem', type: 'pkcs8' }));
}

t.test('settings: both or neither, versions and ids checked', async (t) => {
  const base = { CAPSULE_DATA_DIR: mkdtempSync(join(tmpdir(), 'sgn-cfg-')), LOG_LEVEL: 'silent' };
  t.teardown(() => rmSync(base.CAPSULE_DATA_DIR, { recursive: true, force: true }));
  t.equal(loadConfig(base).signing, null, 'ephemeral by default');
  const ok = loadConfig({
    ...base,
    CAPSULE_SIGNING_AUTHORITY_ID: 'acme',
    CAPSULE_SIGNING_KEY_FILES: '2:/k/b.pem,1:/k/a.pem',
  });
  t.strictSame(ok.signing, {
    authorityId: 'acme',
    keyFiles: [
      { version: 1, path: '/k/a.pem' },
      { version: 2, path: '/k/b.pem' },
    ],
  });
  for (const [env, re] of [
    [{ CAPSULE_SIGNING_AUTHORITY_ID: 'acme' }, /CAPSULE_SIGNING_KEY_FILES/],
    [{ CAPSULE_SIGNING_KEY_FILES: '1:/k' }, /CAPSULE_SIGNING_AUTHORITY_ID/],
    [{ CAPSULE_SIGNING_AUTHORITY_ID: 'Acme!', CAPSULE_SIGNING_KEY_FILES: '1:/k' }, /AUTHORITY_ID/],
    [{ CAPSULE_SIGNING_AUTHORITY_ID: 'a', CAPSULE_SIGNING_KEY_FILES: '0:/k' }, /version >= 1/],
    [{ CAPSULE_SIGNING_AUTHORITY_ID: 'a', CAPSULE_SIGNING_KEY_FILES: '/k' }, /<version>:<path>/],
    [{ CAPSULE_SIGNING_AUTHORITY_ID: 'a', CAPSULE_SIGNING_KEY_FILES: '1:/k,1:/j' }, /given twice/],
  ] as const) {
    t.throws(() => loadConfig({ ...base, ...env }), re instanceof RegExp ? { message: re } : ConfigError);
  }
});

t.test('signer: highest present version signs; unavailable states; rotation; close', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'sgn-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const [a, b] = [join(dir, 'a.pem'), join(dir, 'b.pem')];
  const s = new FileSigner(
    {
      authorityId: 'acme',
      keyFiles: [
        { version: 1, path: a },
        { version: 2, path: b },
      ],
    },
    NOW,
  );
  t.equal(
    s.withKey(() => 1),
    null,
    'no file yet: unavailable',
  );
  keyFile(a);
  let held: Uint8Array | null = null;
  t.equal(
    s.withKey((k) => {
      held = k.privateKey;
      t.equal(k.privateKey.length, 32);
      t.equal(k.key_id, 'svc-authority-acme-v1');
      return k.signing_key_version;
    }),
    1,
  );
  t.ok(
    held!.every((x: number) => x === 0),
    'the copy handed out is zeroized after the call',
  );
  keyFile(b);
  t.equal(
    s.withKey((k) => k.signing_key_version),
    2,
    'rotation: the new file signs',
  );
  t.equal(s.manifest().authorities[0]!.keys.length, 2);
  writeFileSync(b, 'garbage');
  t.equal(
    s.withKey(() => 1),
    null,
    'an unparsable highest file: unavailable, not v1',
  );
  keyFile(b, 'x25519');
  t.equal(
    s.withKey(() => 1),
    null,
    'a non-Ed25519 key: unavailable',
  );
  unlinkSync(b);
  t.equal(
    s.withKey(() => 1),
    null,
    'the version already used disappeared: unavailable, not v1',
  );
  t.ok(s.keyRecord('svc-authority-acme-v2'), 'its public key still answers for old proofs');
  keyFile(b);
  t.equal(
    s.withKey((k) => k.signing_key_version),
    2,
  );
  const internal = (s as unknown as { loaded: Map<number, { seed: Buffer }> }).loaded;
  const seeds = [...internal.values()].map((l) => l.seed);
  s.close();
  t.ok(
    seeds.every((x) => x.every((y) => y === 0)),
    'close zeroizes every private key',
  );
});
