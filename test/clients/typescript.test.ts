// The TypeScript SDK against a real `capsule serve` (its own runner, real
// kernel isolation): the README example as written, every endpoint family,
// retries through a proxy that fails N times, time-outs, error classes, a
// 10,000-record batch, a 3-step session chain whose proofs link, and the
// offline verifier agreeing with the online one.
import t from 'tap';
import { createHash } from 'node:crypto';
import { spawnSync } from 'node:child_process';
import { mkdirSync, mkdtempSync, readdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { createServer, request as httpRequest, type IncomingMessage, type Server } from 'node:http';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath, pathToFileURL } from 'node:url';
import {
  CapsuleClient,
  CapsuleError,
  DigestMismatchError,
  InvalidApiKeyError,
  InvalidParametersError,
  NetworkError,
  RateLimitedError,
  ResourceNotFoundError,
  ServiceUnavailableError,
  TierRequiredError,
  TimeoutError,
  runBatch,
  runSession,
  verdictLine,
  verifyProof,
  PARENT_PROOF_KEY,
} from '../../clients/typescript/src/index.js';
import { proofVectors } from '../proof/helpers.js';
import { serve, signupKey } from '../helpers/serve.js';

const SDK_ENTRY = fileURLToPath(new URL('../../clients/typescript/src/index.js', import.meta.url));
const README = fileURLToPath(new URL('../../../clients/typescript/README.md', import.meta.url));
const sha512 = (b: Uint8Array | string) => `sha512:${createHash('sha512').update(b).digest('hex')}`;

/** A proxy in front of the server that answers the first `fail` matching requests itself. */
interface Faulty {
  url: string;
  seen: { method: string; path: string; idempotencyKey: string | undefined; at: number }[];
  close(): Promise<void>;
}
async function faultyProxy(
  target: string,
  match: (req: IncomingMessage) => boolean,
  fail: number,
  answer: 'drop' | '503' | '429' | '500' | 'slow',
): Promise<Faulty> {
  const seen: Faulty['seen'] = [];
  let failed = 0;
  const u = new URL(target);
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      if (match(req))
        seen.push({
          method: req.method!,
          path: req.url!,
          idempotencyKey: req.headers['idempotency-key'] as string | undefined,
          at: Date.now(),
        });
      if (match(req) && failed < fail) {
        failed++;
        if (answer === 'drop') return req.socket.destroy();
        if (answer === 'slow') return void setTimeout(() => res.destroyed || res.end('{}'), 5000);
        const status = Number(answer);
        const headers: Record<string, string> = {
          'content-type': 'application/json',
          'x-svc-request-id': `req_fault${failed}`,
        };
        if (status === 429) headers['retry-after'] = '1';
        res.writeHead(status, headers);
        const code = status === 429 ? 'rate_limited' : status === 503 ? 'service_unavailable' : 'internal_error';
        return res.end(
          JSON.stringify({
            error: {
              code,
              type: 'x',
              message: 'injected',
              request_id: `req_fault${failed}`,
              ...(status === 429 ? { retry_after: 1 } : {}),
            },
          }),
        );
      }
      const p = httpRequest(
        { host: u.hostname, port: u.port, path: req.url, method: req.method, headers: req.headers },
        (pr) => {
          res.writeHead(pr.statusCode ?? 502, pr.headers);
          pr.pipe(res);
        },
      );
      p.on('error', () => res.destroy());
      p.end(Buffer.concat(chunks));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', () => r()));
  const port = (server.address() as { port: number }).port;
  return {
    url: `http://127.0.0.1:${port}`,
    seen,
    close: () =>
      new Promise<void>((r) => {
        server.closeAllConnections();
        server.close(() => r());
      }),
  };
}

/** The ```js block at the top of the README. */
function readmeExample(): string {
  const m = /```js\n([\s\S]*?)```/.exec(readFileSync(README, 'utf8'));
  if (!m?.[1]) throw new Error('README has no ```js block');
  return m[1];
}

t.test('TypeScript SDK against capsule serve', async (t) => {
  const s = await serve();
  t.teardown(s.stop);
  const key = await signupKey(s.url);
  const client = new CapsuleClient({ baseUrl: s.url, apiKey: key, traceId: 'trace-sdk-1' });

  await t.test('the README example runs as written', async (t) => {
    const dir = mkdtempSync(join(tmpdir(), 'sdk-readme-'));
    t.teardown(() => rmSync(dir, { recursive: true, force: true }));
    mkdirSync(join(dir, 'node_modules/capsule-sdk'), { recursive: true });
    writeFileSync(
      join(dir, 'node_modules/capsule-sdk/package.json'),
      JSON.stringify({ name: 'capsule-sdk', type: 'module', exports: './index.js' }),
    );
    writeFileSync(
      join(dir, 'node_modules/capsule-sdk/index.js'),
      `export * from ${JSON.stringify(pathToFileURL(SDK_ENTRY).href)};\n`,
    );
    writeFileSync(join(dir, 'example.mjs'), readmeExample());
    const r = spawnSync(process.execPath, ['example.mjs'], {
      cwd: dir,
      env: { PATH: process.env.PATH, CAPSULE_BASE_URL: s.url, CAPSULE_API_KEY: key },
      encoding: 'utf8',
      timeout: 120_000,
    });
    t.equal(r.status, 0, `exit 0: ${r.stderr}`);
    t.match(r.stdout, /AuditProof verified/, r.stdout);
    t.notMatch(r.stdout, /destruction verified/i);
  });

  await t.test('capsule endpoints, download digest, proofs, offline = online verdict', async (t) => {
    t.equal((await client.health()).status, 'healthy');
    t.equal((await client.ready()).status, 'ready');
    const me = await client.me();
    t.match(me.customer_id, /^cus_/);
    const doc = await client.openapi();
    t.equal(doc['openapi'], '3.1.0');
    const c = await client.createCapsule({ ttl: 120, data_classification: 'PII', metadata: { case: 'sdk' } });
    t.equal((await client.getCapsule(c.id)).metadata['case'], 'sdk');
    const up = await client.upload(c.id, 'in.csv', 'a,b\n1,2\n');
    t.equal(up.sha512, sha512('a,b\n1,2\n'));
    const ex = await client.exec(c.id, {
      command: 'wc -l < /data/input/in.csv > /data/output/n.txt; printf "%s" "$PWD"',
    });
    t.equal(ex.exit_code, 0, ex.stderr);
    const out = await client.listOutput(c.id);
    t.same(
      out.files.map((f) => f.filename),
      ['n.txt'],
    );
    t.equal(new TextDecoder().decode(await client.download(c.id, 'n.txt')), '2\n');
    const d = await client.destroy(c.id);
    t.equal(d.status, 'destroyed');
    const offline = verifyProof(d.audit_proof);
    t.equal(offline.valid, true);
    t.equal(verdictLine(offline, d.audit_proof), 'AuditProof verified');
    const online = await client.verifyOnline(d.audit_proof);
    t.equal(online.valid, offline.valid);
    t.same(online.checks, offline.valid ? offline.checks : undefined, 'online and offline checks agree');
    const record = await client.record(c.id);
    t.equal(verifyProof(record).valid, true, 'the AuditRecord verifies offline too');
    const pub = await client.publicProof(c.id);
    t.equal(verifyProof(pub).valid, true);
    const tampered = { ...pub, capsule_context: { jurisdiction: 'US', data_classification: 'PII' } };
    const bad = verifyProof(tampered);
    t.equal(bad.valid, false);
    t.match(verdictLine(bad, tampered), /^AuditProof NOT verified: stage 4 .*CanonicalHashMismatch\/DoesNotMatch$/);
    t.same((await client.verifyOnline(tampered)).failure_reason, {
      type: 'CanonicalHashMismatch',
      reason: 'DoesNotMatch',
    });
    const k = await client.key(String((pub['attestation'] as { key_id: string }).key_id));
    t.equal(`base64:${k.public_key}`, (pub['attestation'] as { public_key: string }).public_key);
    t.match((await client.proof(c.id)).proof_id, /^prf_/);
    t.equal((await client.errorDoc('rate_limited'))['code'] ?? 'rate_limited', 'rate_limited');
  });

  await t.test('paged lists iterate every item', async (t) => {
    const k2 = await signupKey(s.url);
    const c2 = new CapsuleClient({ baseUrl: s.url, apiKey: k2 });
    const ids: string[] = [];
    for (let i = 0; i < 3; i++) ids.push((await c2.createCapsule({ ttl: 60 })).id);
    const listed: string[] = [];
    for await (const c of c2.listCapsules({ limit: 1 })) listed.push(c.id);
    t.same(listed.sort(), [...ids].sort(), 'three pages of one');
    for (const id of ids) await c2.destroy(id);
    const keys: string[] = [];
    for await (const k of c2.listApiKeys({ limit: 1 })) keys.push(k.id);
    t.equal(keys.length, 1);
    let usage = 0;
    for await (const _ of c2.usageItems({ limit: 2 })) usage++;
    t.ok(usage >= 3, `${usage} usage items`);
    t.match(await c2.usageItemsCsv(), /^[a-z_,]+\r\n/);
    t.equal((await c2.usageSummary()).tier, 'free');
    t.equal((await c2.usageEstimate()).tier, 'free');
    t.equal((await c2.mfaStatus()).status, 'none');
  });

  await t.test('capsulefiles and sessions', async (t) => {
    const cf = await client.createCapsulefile({ name: 'sdk-cf', runtime: 'python3.11', entrypoint: 'python3 main.py' });
    await client.addCapsulefileFile(cf.id, 'main.py', 'print("from entrypoint")\n');
    t.equal((await client.updateCapsulefile(cf.id, { default_ttl: 90 }))['default_ttl'], 90);
    const fin = await client.finalizeCapsulefile(cf.id);
    t.match(fin.content_hash, /^sha512:/);
    const names: string[] = [];
    for await (const x of client.listCapsulefiles()) names.push(String(x.name));
    t.ok(names.includes('sdk-cf'));
    const pinned = await client.createCapsule({ capsulefile_id: cf.id });
    t.equal((await client.exec(pinned.id, {})).stdout, 'from entrypoint\n');
    await client.destroy(pinned.id);
    const sess = await client.createSession({});
    t.equal((await client.getSession(sess.session_id)).status, 'active');
    t.equal(
      (await client.sessionExec(sess.session_id, { command: 'cat /data/input/data', input_data: 'x' })).output,
      'x',
    );
    const sd = await client.destroySession(sess.session_id);
    const legacy = verifyProof(sd.cdp);
    t.equal(legacy.valid, true);
    t.match(verdictLine(legacy, sd.cdp), /^AuditProof verified at reduced scope/);
  });

  await t.test('error classes carry request_id, field, retry_after', async (t) => {
    const e1 = await client.getCapsule('cap_0000').catch((e: unknown) => e);
    t.type(e1, ResourceNotFoundError);
    t.type(e1, CapsuleError);
    t.match((e1 as CapsuleError).requestId, /^req_/);
    t.equal((e1 as CapsuleError).status, 404);
    const e2 = await client.createCapsule({ ttl: -5 }).catch((e: unknown) => e);
    t.type(e2, InvalidParametersError);
    t.equal((e2 as CapsuleError).field, 'ttl');
    const e3 = await new CapsuleClient({ baseUrl: s.url, apiKey: 'sk_live_nope' }).me().catch((e: unknown) => e);
    t.type(e3, InvalidApiKeyError);
    const e4 = await client.createEgressProfile({ name: 'p' }).catch((e: unknown) => e);
    t.type(e4, TierRequiredError);
    t.equal((e4 as CapsuleError).attempts, 1, 'a 403 is not retried');
  });

  await t.test('retries: full jitter bounds, Retry-After, one Idempotency-Key per call', async (t) => {
    const create = (r: IncomingMessage) => r.method === 'POST' && r.url === '/v1/capsules';
    // 503 three times, then through: 4 attempts with one key.
    const p1 = await faultyProxy(s.url, create, 3, '503');
    t.teardown(p1.close);
    const waits: number[] = [];
    const c1 = new CapsuleClient({
      baseUrl: p1.url,
      apiKey: key,
      backoffBaseMs: 100,
      sleep: async (ms) => {
        waits.push(ms);
      },
    });
    // service_unavailable carries no retry_after from this proxy: backoff applies.
    const made = await c1.createCapsule({ ttl: 60 });
    t.equal(p1.seen.length, 4, 'three failures and the success');
    t.equal(new Set(p1.seen.map((x) => x.idempotencyKey)).size, 1, 'the same Idempotency-Key on every attempt');
    t.match(p1.seen[0]!.idempotencyKey, /^[0-9a-f-]{36}$/);
    t.equal(waits.length, 3);
    waits.forEach((w, n) =>
      t.ok(w >= 0 && w < Math.min(30_000, 100 * 2 ** n), `wait ${n}: ${w} in [0, ${100 * 2 ** n})`),
    );
    await client.destroy(made.id);

    // A logical call that never succeeds: 1 + 4 attempts, then the last error.
    const p2 = await faultyProxy(s.url, create, 100, '500');
    t.teardown(p2.close);
    const jitter: number[] = [];
    const c2 = new CapsuleClient({ baseUrl: p2.url, apiKey: key, sleep: async (ms) => void jitter.push(ms) });
    const e = await c2.createCapsule({}).catch((x: unknown) => x);
    t.type(e, CapsuleError);
    t.equal((e as CapsuleError).attempts, 5, 'default 4 retries');
    t.equal(p2.seen.length, 5);
    t.equal(new Set(p2.seen.map((x) => x.idempotencyKey)).size, 1);
    jitter.forEach((w, n) => t.ok(w < Math.min(30_000, 500 * 2 ** n), `default backoff ${n}: ${w} < ${500 * 2 ** n}`));

    // 429 with Retry-After: 1 → the client waits 1 s (real sleep), then succeeds.
    const me = (r: IncomingMessage) => r.url === '/v1/customers/me';
    const p3 = await faultyProxy(s.url, me, 1, '429');
    t.teardown(p3.close);
    const c3 = new CapsuleClient({ baseUrl: p3.url, apiKey: key });
    const started = Date.now();
    await c3.me();
    t.equal(p3.seen.length, 2);
    t.ok(
      p3.seen[1]!.at - p3.seen[0]!.at >= 950,
      `second attempt after Retry-After (${p3.seen[1]!.at - p3.seen[0]!.at} ms)`,
    );
    t.ok(Date.now() - started < 10_000);
    const p3b = await faultyProxy(s.url, me, 100, '429');
    t.teardown(p3b.close);
    const e3 = await new CapsuleClient({ baseUrl: p3b.url, apiKey: key, maxRetries: 1, sleep: async () => {} })
      .me()
      .catch((x: unknown) => x);
    t.type(e3, RateLimitedError);
    t.equal((e3 as CapsuleError).retryAfter, 1);
    t.equal((e3 as CapsuleError).requestId, 'req_fault2');

    // Dropped connections on a GET are retried; an exec (not replayable) is not retried after a 500.
    const p4 = await faultyProxy(s.url, me, 2, 'drop');
    t.teardown(p4.close);
    await new CapsuleClient({ baseUrl: p4.url, apiKey: key, sleep: async () => {} }).me();
    t.equal(p4.seen.length, 3);
    const live = await client.createCapsule({ ttl: 60 });
    const execPath = (r: IncomingMessage) => r.url === `/v1/capsules/${live.id}/exec`;
    const p5 = await faultyProxy(s.url, execPath, 1, '500');
    t.teardown(p5.close);
    const e5 = await new CapsuleClient({ baseUrl: p5.url, apiKey: key, sleep: async () => {} })
      .exec(live.id, { command: 'true' })
      .catch((x: unknown) => x);
    t.equal((e5 as CapsuleError).status, 500);
    t.equal(p5.seen.length, 1, 'a 500 on exec is not retried (the command may have run)');
    const p6 = await faultyProxy(s.url, execPath, 2, '503');
    t.teardown(p6.close);
    const ok = await new CapsuleClient({ baseUrl: p6.url, apiKey: key, sleep: async () => {} }).exec(live.id, {
      command: 'echo 6',
    });
    t.equal(ok.stdout, '6\n');
    t.equal(p6.seen.length, 3, 'a 503 on exec is retried (the service did not run it)');
    t.type(
      await new CapsuleClient({ baseUrl: p6.url, apiKey: key, maxRetries: 0 }).exec(live.id, { command: 'true' }).then(
        () => null,
        (x: unknown) => x,
      ),
      'null',
    );
    await client.destroy(live.id);
    const unreachable = await new CapsuleClient({
      baseUrl: 'http://127.0.0.1:1',
      apiKey: key,
      maxRetries: 2,
      sleep: async () => {},
    })
      .me()
      .catch((x: unknown) => x);
    t.type(unreachable, NetworkError);
    t.equal((unreachable as CapsuleError).attempts, 3);
    t.type(new ServiceUnavailableError(503, {}), CapsuleError);
  });

  await t.test('time-outs per call and per client', async (t) => {
    const me = (r: IncomingMessage) => r.url === '/v1/customers/me';
    const p = await faultyProxy(s.url, me, 100, 'slow');
    t.teardown(p.close);
    const c = new CapsuleClient({
      baseUrl: p.url,
      apiKey: key,
      maxRetries: 1,
      sleep: async () => {},
      timeouts: { default: 300 },
    });
    const started = Date.now();
    const e = await c.me().catch((x: unknown) => x);
    t.type(e, TimeoutError);
    t.equal((e as CapsuleError).attempts, 2);
    t.ok(Date.now() - started < 3000, 'two 300 ms attempts');
    const e2 = await c.me({ timeoutMs: 100 }).catch((x: unknown) => x);
    t.type(e2, TimeoutError);
    t.match((e2 as Error).message, /100 ms/);
    t.same(c.timeouts, { create: 30_000, exec: 120_000, verify: 60_000, default: 300 });
    t.same(new CapsuleClient({ baseUrl: s.url }).timeouts, {
      create: 30_000,
      exec: 120_000,
      verify: 60_000,
      default: 30_000,
    });
  });

  await t.test('a corrupted download is refused', async (t) => {
    const c = await client.createCapsule({ ttl: 60 });
    await client.exec(c.id, { command: 'echo data > /data/output/f.txt' });
    const flip: typeof fetch = async (input, init) => {
      const r = await fetch(input, init);
      if (!String(input).includes('/output/f.txt')) return r;
      const b = new Uint8Array(await r.arrayBuffer());
      b[0] = b[0]! ^ 1;
      return new Response(b, { status: r.status, headers: r.headers });
    };
    const e = await new CapsuleClient({ baseUrl: s.url, apiKey: key, fetch: flip })
      .download(c.id, 'f.txt')
      .catch((x: unknown) => x);
    t.type(e, DigestMismatchError);
    await client.destroy(c.id);
  });

  await t.test('batch of 10,000 records', async (t) => {
    const records = Array.from({ length: 10_000 }, (_, i) => ({ custom_id: `r${i}`, n: i }));
    const script = [
      'import json',
      "out = open('/data/output/results.jsonl', 'w')",
      "for line in open('/data/input/records.jsonl'):",
      '    r = json.loads(line)',
      "    if r['n'] % 1000 == 7:",
      "        out.write(json.dumps({'custom_id': r['custom_id'], 'status': 'errored', 'output': None, 'error_code': 'odd', 'error_message': 'n%1000==7'}) + '\\n')",
      '    else:',
      "        out.write(json.dumps({'custom_id': r['custom_id'], 'status': 'succeeded', 'output': r['n'] * 2, 'error_code': None, 'error_message': None}) + '\\n')",
    ].join('\n');
    // The convention's entrypoint: a finalized Capsulefile that reads records.jsonl and writes results.jsonl.
    const cf = await client.createCapsulefile({
      name: 'sdk-batch',
      runtime: 'python3.11',
      entrypoint: 'python3 main.py',
    });
    await client.addCapsulefileFile(cf.id, 'main.py', script + '\n');
    await client.finalizeCapsulefile(cf.id);
    const started = Date.now();
    const r = await runBatch(client, records, { capsulefileId: cf.id });
    const ms = Date.now() - started;
    t.equal(r.results.length, 10_000);
    t.same(
      r.results.map((x) => x.custom_id),
      records.map((x) => x.custom_id),
      'one result per record, in order',
    );
    t.equal(r.results.filter((x) => x.status === 'errored').length, 10);
    t.same(r.results[7], {
      custom_id: 'r7',
      status: 'errored',
      output: null,
      error_code: 'odd',
      error_message: 'n%1000==7',
    });
    t.same(r.results[9999], {
      custom_id: 'r9999',
      status: 'succeeded',
      output: 19998,
      error_code: null,
      error_message: null,
    });
    t.equal(r.verification.valid, true);
    t.comment(`batch of 10,000 records: ${ms} ms end to end`);
  });

  await t.test('a 3-step session chain whose proofs link', async (t) => {
    const cmd =
      "python3 -c \"import os;p='/data/input/state.bin';n=int(open(p).read()) if os.path.exists(p) else 0;open('/data/output/state.bin','w').write(str(n+1));print(n+1)\"";
    const steps = await runSession(client, [cmd, cmd, cmd]);
    t.same(
      steps.map((s) => s.exec.stdout),
      ['1\n', '2\n', '3\n'],
      'state carried from capsule to capsule',
    );
    t.equal(new TextDecoder().decode(steps[2]!.state!), '3');
    t.equal(steps[0]!.parentProofId, null);
    t.equal(steps[1]!.parentProofId, steps[0]!.proofId);
    t.equal(steps[2]!.parentProofId, steps[1]!.proofId);
    for (const [i, st] of steps.entries()) {
      t.equal(st.verification.valid, true, `step ${i + 1} proof verifies`);
      const cap = await client.getCapsule(st.capsuleId);
      t.equal(cap.metadata[PARENT_PROOF_KEY], st.parentProofId ?? undefined, `step ${i + 1} names its parent`);
    }
    // The signed activity trails bind the link: what step n wrote is what step n+1 read.
    for (let i = 0; i + 1 < steps.length; i++) {
      const a = (await client.publicProof(steps[i]!.capsuleId))['activity'] as { type: string; sha512?: string }[];
      const b = (await client.publicProof(steps[i + 1]!.capsuleId))['activity'] as { type: string; sha512?: string }[];
      const out = a.find((e) => e.type === 'FileDownloaded')!.sha512;
      const into = b.find((e) => e.type === 'FileUploaded')!.sha512;
      t.equal(into, out, `state.bin of step ${i + 1} → step ${i + 2}`);
      t.equal(into, sha512(String(i + 1)));
    }
  });
});

t.test('offline verifier: every vector, verdict wording', async (t) => {
  for (const v of proofVectors()) {
    const r = verifyProof(v.document, v.manifest);
    t.equal(r.valid, v.expect['valid'], v.name);
    const line = verdictLine(r, v.document);
    t.notMatch(line, /destruction verified/i);
    if (r.valid) t.match(line, /^AuditProof verified/);
    else
      t.match(
        line,
        new RegExp(`stage ${v.expect['stage_reached']} .*${(v.expect['failure_reason'] as { type: string }).type}`),
      );
  }
  const legacy = proofVectors().find((v) => v.name.includes('legacy'))!;
  t.match(verdictLine(verifyProof(legacy.document), legacy.document), /at reduced scope/);
  const partial = proofVectors().find((v) => v.name === 'valid-partial-signed.json')!;
  t.match(verdictLine(verifyProof(partial.document), partial.document), /partial proof/);
  // Destruction vectors: the signed statement of an incomplete destruction is in the verdict line.
  const dir = fileURLToPath(new URL('../../../test/data/destruction-vectors/', import.meta.url));
  for (const f of readdirSync(dir).filter((x) => x.endsWith('.json'))) {
    const v = JSON.parse(readFileSync(join(dir, f), 'utf8'));
    t.equal(verdictLine(verifyProof(v.document), v.document), v.summary, `${f}: summary line`);
  }
});
