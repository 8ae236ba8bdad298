// Customer co-signatures (Capsulefile signing_config) against real signers:
// HTTPS servers on loopback requiring the operator's client certificate
// (mutual TLS), with certificates made by openssl here. Ed25519 and RSA-PSS
// signers sign each event hash; a hanging signer, one answering garbage and
// one that refuses the operator's certificate leave every slot `missing`
// without slowing the capsule; `capsule verify --customer-key` checks the
// record, reports a forged signature and exits 1 for it.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { createHash, generateKeyPairSync, sign } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { verifyProof } from '../../shared/proof/index.js';
import { startRunner } from '../helpers/runner.js';
import { start, type Api } from './harness.js';
import { pki, startSigner } from '../helpers/cosign-signer.js';

const CLI = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));

async function pinned(api: Api, key: string, name: string, signing: Record<string, unknown>): Promise<string> {
  const cf = await api.req('POST', '/v1/capsulefiles', {
    key,
    json: { name, runtime: 'sh', entrypoint: 'true', signing_config: signing },
  });
  if (cf.status !== 201) throw new Error(`capsulefile: ${cf.status} ${cf.text}`);
  const fin = await api.req('POST', `/v1/capsulefiles/${cf.body.id}/finalize`, { key });
  if (fin.status !== 200) throw new Error(`finalize: ${fin.status} ${fin.text}`);
  return cf.body.id as string;
}

/** create, two execs, destroy: the destroy response. */
async function session(api: Api, key: string, capsulefileId: string): Promise<{ body: any; execMs: number[] }> {
  const c = await api.req('POST', '/v1/capsules', { key, json: { capsulefile_id: capsulefileId } });
  if (c.status !== 201) throw new Error(`create: ${c.status} ${c.text}`);
  const execMs: number[] = [];
  for (const cmd of ['echo one', 'echo two']) {
    const t0 = performance.now();
    const ex = await api.req('POST', `/v1/capsules/${c.body.id}/exec`, { key, json: { command: cmd } });
    execMs.push(performance.now() - t0);
    if (ex.status !== 200) throw new Error(`exec: ${ex.status} ${ex.text}`);
  }
  const d = await api.req('DELETE', `/v1/capsules/${c.body.id}`, { key });
  if (d.status !== 200) throw new Error(`destroy: ${d.status} ${d.text}`);
  return { body: d.body, execMs };
}

const sha512 = (s: string) => 'sha512:' + createHash('sha512').update(s, 'utf8').digest('hex');

/** JCS for these events (flat objects of strings, integers and booleans): sorted keys, JSON.stringify values. */
function jcsFlat(o: Record<string, unknown>): string {
  return `{${Object.keys(o)
    .sort()
    .map(
      (k) =>
        `${JSON.stringify(k)}:${typeof o[k] === 'object' && o[k] !== null ? jcsFlat(o[k] as Record<string, unknown>) : JSON.stringify(o[k])}`,
    )
    .join(',')}}`;
}

t.test('customer co-signatures over mutual TLS', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'cosign-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const p = pki(dir);
  p.ca('operator-ca');
  p.ca('customer-ca');
  p.ca('other-ca');
  p.leaf('operator', 'operator-ca', 'extendedKeyUsage=clientAuth\n');
  p.leaf('signer', 'customer-ca', 'subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n');
  const ed = generateKeyPairSync('ed25519');
  const rsa = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const edPub = ed.publicKey.export({ format: 'pem', type: 'spki' }).toString();
  const rsaPub = rsa.publicKey.export({ format: 'pem', type: 'spki' }).toString();
  writeFileSync(p.path('ed.pub.pem'), edPub);
  writeFileSync(p.path('rsa.pub.pem'), rsaPub);
  const keys = { ed: ed.privateKey, rsa: rsa.privateKey };
  const signer = await startSigner(p.read('signer.key'), p.read('signer.pem'), p.read('operator-ca.pem'), keys);
  t.teardown(() => signer.close());
  // A signer whose clients must come from another CA: the operator's certificate is refused.
  const strict = await startSigner(p.read('signer.key'), p.read('signer.pem'), p.read('other-ca.pem'), keys);
  t.teardown(() => strict.close());

  const runner = await startRunner();
  t.teardown(() => runner.stop());
  const s = await start('sqlite', runner.client, {
    CAPSULE_RATE_LIMITS: 'off',
    CAPSULE_WEBHOOK_ALLOW_PRIVATE: '1',
    CAPSULE_COSIGN_CLIENT_CERT_FILE: p.path('operator.pem'),
    CAPSULE_COSIGN_CLIENT_KEY_FILE: p.path('operator.key'),
    CAPSULE_COSIGN_TIMEOUT_MS: '1500',
  });
  t.teardown(s.close);
  const { api } = s;
  const alice = await api.signup();
  const ca_cert = p.read('customer-ca.pem');

  await t.test('a signing_config is validated and bound into the content hash', async (t) => {
    const bad = await api.req('POST', '/v1/capsulefiles', {
      key: alice.key,
      json: {
        name: 'bad',
        runtime: 'sh',
        entrypoint: 'true',
        signing_config: { endpoint: signer.url('/ed'), algorithm: 'Ed25519', public_key: 'nope' },
      },
    });
    t.equal(bad.status, 400);
    t.match(bad.body.error.message, /^signing_config\.public_key/);
    const a = await pinned(api, alice.key, 'h1', {
      endpoint: signer.url('/ed'),
      algorithm: 'Ed25519',
      public_key: edPub,
      ca_cert,
    });
    const b = await pinned(api, alice.key, 'h2', {
      endpoint: signer.url('/ed'),
      algorithm: 'Ed25519',
      public_key: rsaPub,
      ca_cert,
    });
    const ha = (await api.req('GET', `/v1/capsulefiles/${a}`, { key: alice.key })).body.content_hash;
    const hb = (await api.req('GET', `/v1/capsulefiles/${b}`, { key: alice.key })).body.content_hash;
    t.not(ha, hb, 'a different public key is a different content hash');
  });

  for (const [name, path, pub, algorithm] of [
    ['Ed25519', '/ed', edPub, 'Ed25519'],
    ['RSA-PSS', '/rsa', rsaPub, 'RSA-PSS-SHA256'],
  ] as const) {
    await t.test(`${name}: every event co-signed, the activity root unchanged, verified offline`, async (t) => {
      const cf = await pinned(api, alice.key, `ok-${name}`, {
        endpoint: signer.url(path),
        algorithm,
        public_key: pub,
        ca_cert,
      });
      const before = signer.seen.length;
      const { body } = await session(api, alice.key, cf);
      const cdp = body.cdp;
      t.ok(verifyProof(cdp).valid, 'the service proof verifies as before');
      const att = cdp.customer_attestations as any[];
      t.equal(att.length, cdp.activity.length, 'one slot per trail event');
      t.ok(
        att.every((a) => a.algorithm === algorithm && typeof a.signature === 'string'),
        'all signed',
      );
      t.equal(body.audit_proof.customer_attestations, undefined, 'record-only: not in the shareable audit_proof');
      // The hash sent and stored is SHA-512 of the event's JCS, computed here independently.
      for (const [i, ev] of (cdp.activity as Record<string, unknown>[]).entries())
        t.equal(att[i].event_hash, sha512(jcsFlat(ev)), `event ${i + 1} hash`);
      const posted = signer.seen.slice(before).map((x) => x.body);
      t.same(
        posted.map((b) => b.seq).sort((x, y) => x - y),
        att.map((a) => a.seq),
        'one POST per event',
      );
      t.ok(posted.every((b) => b.capsule_id === cdp.capsule_id && b.algorithm === algorithm));

      const file = join(dir, `${name}.json`);
      writeFileSync(file, JSON.stringify(cdp));
      const keyFile = p.path(algorithm === 'Ed25519' ? 'ed.pub.pem' : 'rsa.pub.pem');
      const ok = spawnSync(process.execPath, [CLI, 'verify', '--customer-key', keyFile, file], { encoding: 'utf8' });
      t.equal(ok.status, 0, ok.stderr);
      t.match(
        ok.stdout,
        new RegExp(`AuditProof verified.*customer co-signatures: ${att.length} valid, 0 missing, 0 forged`),
      );
      // A forged signature (another key's) in the record-only slot: the service proof still verifies, the CLI says forged.
      const forged = structuredClone(cdp);
      const other = generateKeyPairSync('ed25519').privateKey;
      forged.customer_attestations[1] = {
        ...forged.customer_attestations[1],
        algorithm: 'Ed25519',
        signature: sign(null, Buffer.from(forged.customer_attestations[1].event_hash), other).toString('base64'),
      };
      writeFileSync(file, JSON.stringify(forged));
      t.ok(verifyProof(forged).valid, 'outside the signed view and the leaves');
      const bad = spawnSync(process.execPath, [CLI, 'verify', '--json', '--customer-key', keyFile, file], {
        encoding: 'utf8',
      });
      t.equal(bad.status, 1, 'a forged co-signature fails the check');
      const j = JSON.parse(bad.stdout.trim());
      t.equal(j.valid, true);
      t.same(j.customer_attestations.forged, [forged.customer_attestations[1].seq]);
    });
  }

  await t.test(
    'a hanging signer, a garbage signer and a refused client certificate: missing, never blocking',
    async (t) => {
      for (const [label, endpoint] of [
        ['hang', signer.url('/hang')],
        ['garbage', signer.url('/garbage')],
        ['refused', strict.url('/ed')],
      ] as const) {
        const cf = await pinned(api, alice.key, `fail-${label}`, {
          endpoint,
          algorithm: 'Ed25519',
          public_key: edPub,
          ca_cert,
        });
        const t0 = performance.now();
        const { body, execMs } = await session(api, alice.key, cf);
        const took = performance.now() - t0;
        t.ok(
          Math.max(...execMs) < 1500,
          `${label}: execs did not wait for the signer (${execMs.map((x) => x.toFixed(0)).join(', ')} ms)`,
        );
        t.ok(took < 6000, `${label}: the whole session took ${took.toFixed(0)} ms`);
        const att = body.cdp.customer_attestations as any[];
        t.equal(att.length, body.cdp.activity.length);
        t.ok(
          att.every((a) => a.status === 'missing' && a.signature === undefined),
          `${label}: every slot missing`,
        );
        t.ok(verifyProof(body.cdp).valid);
      }
      t.notOk(strict.seen.length > 0, 'the strict signer never saw a request from a client it does not trust');
    },
  );
});
