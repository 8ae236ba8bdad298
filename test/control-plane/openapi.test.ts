// The OpenAPI document against the service: the routes the app serves equal
// the document's operations, the served and committed documents equal the
// generated one, and every response of a full lifecycle (real runner, real
// HTTP) matches the document's schema for its operation and status.
import t from 'tap';
import { readFileSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { parse } from 'yaml';
import { OPERATIONS, openapiDocument, openapiPath } from '../../control-plane/http/openapi.js';
import { openapiTypes, openapiYaml } from '../../cli/openapi.js';
import { conformance } from '../helpers/openapi.js';
import { startRunner } from '../helpers/runner.js';
import { Api, start, type Res } from './harness.js';

const TYPES_FILE = fileURLToPath(new URL('../../../clients/typescript/src/types.gen.ts', import.meta.url));
const YAML_FILE = fileURLToPath(new URL('../../../docs/openapi.yaml', import.meta.url));
const PKG = JSON.parse(readFileSync(new URL('../../../package.json', import.meta.url), 'utf8')) as { version: string };

/** An Api that checks every answer against the document and keeps the problems. */
class ConformingApi extends Api {
  readonly problems: string[] = [];
  seen = new Set<string>();
  override async req(method: string, path: string, opts: Parameters<Api['req']>[2] = {}): Promise<Res> {
    const r = await super.req(method, path, opts);
    const body = r.headers.get('content-type')?.startsWith('application/json') ? r.body : r.text;
    this.problems.push(...conformance(method, path, r.status, body, r.headers.get('content-type')));
    this.seen.add(`${method.toLowerCase()} ${path.split('?')[0]}`);
    return r;
  }
}

t.test('docs/openapi.yaml is the generated document', async (t) => {
  const committed = readFileSync(YAML_FILE, 'utf8');
  t.equal(
    committed,
    openapiYaml(openapiDocument(PKG.version)),
    'run `capsule openapi > docs/openapi.yaml` after changing the registry',
  );
  const doc = parse(committed);
  t.equal(doc.openapi, '3.1.0');
  for (const o of OPERATIONS) t.ok(doc.paths[openapiPath(o.path)]?.[o.method], `${o.method} ${o.path} documented`);
  const ids = OPERATIONS.map((o) => o.operationId);
  t.equal(new Set(ids).size, ids.length, 'operationIds are unique');
  // Every $ref resolves.
  const refs = [...committed.matchAll(/\$ref: "?#\/components\/(\w+)\/([\w-]+)"?/g)];
  t.ok(refs.length > 50);
  for (const [, kind, name] of refs) t.ok(doc.components[kind!]?.[name!], `#/components/${kind}/${name} exists`);
});

t.test('the TypeScript SDK types are generated from the document', async (t) => {
  t.equal(
    readFileSync(TYPES_FILE, 'utf8'),
    openapiTypes(openapiDocument(PKG.version)),
    'run `capsule openapi --types > clients/typescript/src/types.gen.ts` after changing the registry',
  );
});

t.test('served routes, served document and a conforming lifecycle', async (t) => {
  const runner = await startRunner();
  t.teardown(() => runner.stop());
  const s = await start('sqlite', runner.client, { CAPSULE_RATE_LIMITS: 'off' });
  t.teardown(s.close);

  const served = s.cp.routes.map((r) => `${r.method} ${r.path}`).sort();
  const documented = OPERATIONS.map((o) => `${o.method} ${o.path}`).sort();
  t.strictSame(served, documented, 'the app serves exactly the documented operations');

  const api = new ConformingApi(s.cp.url);
  const doc = await api.req('GET', '/v1/openapi.json');
  t.equal(doc.status, 200);
  t.strictSame(doc.body, openapiDocument(doc.body.info.version), 'served document is the generated one');

  const { key } = await api.signup();
  await api.req('GET', '/v1/customers/me', { key });
  await api.req('GET', '/v1/health');
  await api.req('GET', '/v1/health/ready');
  const c = (await api.req('POST', '/v1/capsules', { key, json: { ttl: 120 }, headers: { 'idempotency-key': 'k1' } }))
    .body;
  await api.req('GET', `/v1/capsules/${c.id}`, { key });
  await api.req('GET', '/v1/capsules?limit=5', { key });
  await api.req('POST', `/v1/capsules/${c.id}/upload?filename=in.txt`, { key, raw: 'hello\n' });
  const ex = await api.req('POST', `/v1/capsules/${c.id}/exec`, {
    key,
    json: { command: 'tr a-z A-Z < /data/input/in.txt > /data/output/out.txt; echo ok' },
  });
  t.equal(ex.body.stdout, 'ok\n', ex.text);
  await api.req('GET', `/v1/capsules/${c.id}/output`, { key });
  const dl = await api.req('GET', `/v1/capsules/${c.id}/output/out.txt`, { key });
  t.equal(dl.text, 'HELLO\n');
  const d = await api.req('DELETE', `/v1/capsules/${c.id}`, { key });
  t.equal(d.status, 200, 'destroyed');
  await api.req('GET', `/v1/capsules/${c.id}/cdp`, { key });
  await api.req('GET', `/v1/proofs/${c.id}`, { key });
  const pub = await api.req('GET', `/v1/capsules/${c.id}/cdp/verify`);
  await api.req('GET', `/v1/capsules/${c.id}/cdp/verify?format=presentation`);
  await api.req('GET', `/v1/keys/${encodeURIComponent(pub.body.attestation.key_id)}`);
  const v = await api.req('POST', '/v1/verify', { json: { cdp: pub.body } });
  t.equal(v.body.valid, true);
  await api.req('POST', '/v1/verify', { json: { cdp: { cdp_version: '9' } } });
  await api.req('POST', '/v1/verify', { json: pub.body });
  // Sessions.
  const sess = (await api.req('POST', '/v1/sessions', { key, json: {} })).body;
  await api.req('GET', `/v1/sessions/${sess.session_id}`, { key });
  await api.req('POST', `/v1/sessions/${sess.session_id}/exec`, { key, json: { command: 'echo hi' } });
  await api.req('DELETE', `/v1/sessions/${sess.session_id}`, { key });
  // Capsulefiles.
  const cf = (
    await api.req('POST', '/v1/capsulefiles', {
      key,
      json: { name: 'oa', runtime: 'python3.11', entrypoint: 'python3 main.py' },
    })
  ).body;
  await api.req('POST', `/v1/capsulefiles/${cf.id}/files?filename=main.py`, { key, raw: 'print(1)\n' });
  await api.req('PATCH', `/v1/capsulefiles/${cf.id}`, { key, json: { default_ttl: 60 } });
  await api.req('GET', `/v1/capsulefiles/${cf.id}`, { key });
  await api.req('POST', `/v1/capsulefiles/${cf.id}/finalize`, { key });
  await api.req('GET', '/v1/capsulefiles', { key });
  // Accounts, usage.
  await api.req('GET', '/v1/api-keys', { key });
  await api.req('GET', '/v1/mfa', { key });
  await api.req('GET', '/v1/usage/summary', { key });
  await api.req('GET', '/v1/usage/estimate', { key });
  await api.req('GET', '/v1/usage/items', { key });
  await api.req('GET', '/v1/usage/items.csv', { key });
  await api.req('GET', '/docs/errors/rate_limited', { headers: { accept: 'application/json' } });
  // Errors.
  await api.req('GET', '/v1/capsules', {});
  await api.req('GET', '/v1/capsules/cap_nope', { key });
  await api.req('POST', '/v1/capsules', { key, json: { ttl: -1 } });
  await api.req('POST', '/v1/capsules', { key, json: { nope: 1 } });
  await api.req('POST', `/v1/capsules/${c.id}/exec`, { key, json: { command: 'true' } });
  await api.req('GET', '/v1/egress/profiles', { key });
  await api.req('POST', '/v1/mfa/verify', { key, json: { code: '000000' } });

  t.ok(api.seen.size >= 35, `${api.seen.size} distinct requests`);
  t.strictSame(api.problems, [], 'every response matches the document');
});

t.test('a response the document does not allow is reported', async (t) => {
  t.match(conformance('GET', '/v1/capsules/cap_x', 200, { id: 1 }, 'application/json').join(), /Capsule/);
  t.match(conformance('GET', '/v1/capsules', 201, {}, 'application/json').join(), /status not listed/);
  t.match(conformance('GET', '/v1/nope', 200, {}, 'application/json').join(), /not in the OpenAPI document/);
  t.match(conformance('GET', '/v1/capsules', 401, { error: { code: 'rate_limited' } }, 'application/json').join(), /./);
});
