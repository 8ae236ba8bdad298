// Pinned capsules end to end on the real sandbox runner, SQLite and
// PostgreSQL: the system batch Capsulefiles process 10,000 records inside a
// capsule, and a proof of a pinned capsule carries the Capsulefile id and
// content hash and still verifies after the Capsulefile is deleted.
import t from 'tap';
import { createHash } from 'node:crypto';
import { verifyProof } from '../../shared/proof/index.js';
import { startRunner } from '../helpers/runner.js';
import { DRIVERS, envelope, start, type Api } from '../control-plane/harness.js';

const sha = (b: Uint8Array | string): string => `sha512:${createHash('sha512').update(b).digest('hex')}`;

function records(): { bytes: Buffer; good: number; bad: number } {
  const lines: string[] = [];
  let good = 0;
  let bad = 0;
  for (let i = 0; i < 10_000; i++) {
    if (i % 500 === 3) {
      lines.push('{broken');
      bad++;
      continue;
    }
    lines.push(JSON.stringify({ custom_id: `rec-${i}`, input: `patient note ${i}: Zoë reports ✓ nothing unusual` }));
    good++;
  }
  return { bytes: Buffer.from(`${lines.join('\n')}\n`), good, bad };
}

async function systemId(api: Api, key: string, name: string): Promise<string> {
  const r = await api.req('GET', '/v1/capsulefiles?limit=100', { key });
  const item = (r.body.items as { id: string; name: string; is_system: boolean }[]).find(
    (i) => i.is_system && i.name === name,
  );
  if (!item) throw new Error(`no system Capsulefile ${name}`);
  return item.id;
}

for (const driver of DRIVERS) {
  t.test(`${driver}: pinned capsules on the real runner`, async (t) => {
    const runner = await startRunner();
    t.teardown(() => runner.stop());
    const s = await start(driver, runner.client, { CAPSULE_RATE_LIMITS: 'off' });
    t.teardown(s.close);
    const { api } = s;
    const alice = await api.signup();
    const input = records();

    for (const name of ['system-python3-batch', 'system-node-batch']) {
      await t.test(`${name} processes 10,000 records end to end`, async (t) => {
        const cfId = await systemId(api, alice.key, name);
        const c = await api.req('POST', '/v1/capsules', { key: alice.key, json: { capsulefile_id: cfId } });
        t.equal(c.status, 201, c.text);
        const up = await api.req('POST', `/v1/capsules/${c.body.id}/upload?filename=records.jsonl`, {
          key: alice.key,
          raw: input.bytes,
          headers: { 'content-type': 'application/octet-stream' },
        });
        t.equal(up.status, 200, up.text);
        const started = Date.now();
        const ex = await api.req('POST', `/v1/capsules/${c.body.id}/exec`, { key: alice.key, json: {} });
        t.equal(ex.status, 200, ex.text);
        t.equal(ex.body.exit_code, 0, ex.body.stderr);
        t.comment(`${name}: exec of 10,000 records took ${Date.now() - started} ms (HTTP round trip included)`);
        t.same(JSON.parse(ex.body.stdout), { records: 10_000, succeeded: input.good, errored: input.bad });
        const out = await api.req('GET', `/v1/capsules/${c.body.id}/output/results.jsonl`, { key: alice.key });
        t.equal(out.status, 200);
        t.equal(out.headers.get('x-svc-file-sha512'), sha(out.bytes));
        const results = out.text
          .trimEnd()
          .split('\n')
          .map((l) => JSON.parse(l) as { custom_id: string | null; status: string; output: { sha512: string } | null });
        t.equal(results.length, 10_000);
        t.equal(results.filter((r) => r.status === 'errored' && r.custom_id === null).length, input.bad);
        const r7 = results.find((r) => r.custom_id === 'rec-7');
        t.equal(
          r7?.output?.sha512,
          createHash('sha512').update('patient note 7: Zoë reports ✓ nothing unusual').digest('hex'),
        );
        const d = await api.req('DELETE', `/v1/capsules/${c.body.id}`, { key: alice.key });
        t.equal(d.status, 200, d.text);
        t.match(d.body.capsule_context, { capsulefile_id: cfId });
      });
    }

    await t.test(
      'a proof of a pinned capsule carries the hash and verifies after the Capsulefile is deleted',
      async (t) => {
        const cf = await api.req('POST', '/v1/capsulefiles', {
          key: alice.key,
          json: { name: 'probe', runtime: 'sh', entrypoint: 'sh /capsule/app/run.sh', env_vars: { GREETING: 'hello' } },
        });
        t.equal(cf.status, 201);
        const script =
          'echo "$GREETING from $(cat /capsule/app/word.txt)"; touch /capsule/app/x 2>/dev/null && echo writable || echo read-only\n';
        t.equal(
          (
            await api.req('POST', `/v1/capsulefiles/${cf.body.id}/files?filename=run.sh`, {
              key: alice.key,
              raw: script,
            })
          ).status,
          200,
        );
        t.equal(
          (
            await api.req('POST', `/v1/capsulefiles/${cf.body.id}/files?filename=word.txt`, {
              key: alice.key,
              raw: 'capsule',
            })
          ).status,
          200,
        );
        const fin = await api.req('POST', `/v1/capsulefiles/${cf.body.id}/finalize`, { key: alice.key });
        t.equal(fin.status, 200);
        const hash = fin.body.content_hash as string;

        const c = await api.req('POST', '/v1/capsules', { key: alice.key, json: { capsulefile_id: cf.body.id } });
        t.equal(c.status, 201, c.text);
        const ex = await api.req('POST', `/v1/capsules/${c.body.id}/exec`, { key: alice.key, json: {} });
        t.equal(
          ex.body.stdout,
          'hello from capsule\nread-only\n',
          'env_vars set, files at /capsule/app, mounted read-only',
        );
        envelope(
          t,
          await api.req('DELETE', `/v1/capsulefiles/${cf.body.id}`, { key: alice.key }),
          409,
          'resource_conflict',
        );

        const d = await api.req('DELETE', `/v1/capsules/${c.body.id}`, { key: alice.key });
        t.equal(d.status, 200, d.text);
        t.same(d.body.capsule_context, {
          jurisdiction: 'EU',
          data_classification: 'general',
          capsulefile_id: cf.body.id,
          capsulefile_content_hash: hash,
        });
        t.match(d.body.cdp.activity?.[0], {
          type: 'CapsuleStarted',
          capsulefile_id: cf.body.id,
          capsulefile_content_hash: hash,
        });

        t.equal(
          (await api.req('DELETE', `/v1/capsulefiles/${cf.body.id}`, { key: alice.key })).status,
          204,
          'deletable once no live capsule uses it',
        );
        envelope(
          t,
          await api.req('GET', `/v1/capsulefiles/${cf.body.id}`, { key: alice.key }),
          404,
          'resource_not_found',
        );
        const stored = await api.req('GET', `/v1/proofs/${c.body.id}`, { key: alice.key });
        t.equal(stored.status, 200);
        t.equal(stored.body.cdp.capsule_context.capsulefile_content_hash, hash);
        const v = verifyProof(stored.body.cdp);
        t.equal(v.valid, true, JSON.stringify(v));
        const vp = verifyProof(d.body.audit_proof);
        t.equal(vp.valid, true, 'the AuditProof projection verifies too');
        // Tampering with the bound hash breaks the proof.
        const forged = structuredClone(d.body.audit_proof);
        forged.capsule_context.capsulefile_content_hash = sha('other code');
        t.equal(verifyProof(forged).valid, false);
      },
    );
  });
}
