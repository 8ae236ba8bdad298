import t, { type Test } from 'tap';
import { ApiError } from '../../shared/errors.js';
import {
  checkEgressEntry,
  filenameProblem,
  fileSizeProblem,
  limits,
  parseDefinition,
} from '../../control-plane/capsulefile/index.js';

const base = { name: 'demo', runtime: 'python3', entrypoint: 'python3 main.py' };

/** Asserts invalid_parameters whose message starts with `field:` and whose extra.field is `field`. */
function refuses(t: Test, body: unknown, field: string, why?: RegExp): void {
  try {
    parseDefinition(body);
    t.fail(`accepted, expected an error on ${field}`);
  } catch (err) {
    t.ok(err instanceof ApiError, 'ApiError');
    const e = err as ApiError;
    t.equal(e.code, 'invalid_parameters');
    t.equal(e.extra['field'], field, `field ${field}`);
    t.ok(e.message.startsWith(`${field}: `), e.message);
    if (why) t.match(e.message, why);
  }
}

t.test('required fields and unknown fields are named', async (t) => {
  t.same(parseDefinition(base), base);
  for (const f of ['name', 'runtime', 'entrypoint'] as const) {
    const { [f]: _drop, ...rest } = base;
    refuses(t, rest, f, /is required/);
  }
  refuses(t, { ...base, colour: 'red' }, 'colour', /unknown field/);
  refuses(t, { ...base, mcp_policy: { allowed_tools: ['a'], extra: 1 } }, 'mcp_policy.extra', /unknown field/);
  refuses(
    t,
    {
      ...base,
      signing_config: {
        endpoint: 'https://a.example',
        algorithm: 'Ed25519',
        public_key:
          '-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAL1zRTjvhYOEFn/HpUkqKnmvUCkEj8BWEbNG4JiKS2mo=\n-----END PUBLIC KEY-----\n',
        key: 'x',
      },
    },
    'signing_config.key',
    /unknown field/,
  );
  refuses(t, { ...base, packages: { cargo: ['serde'] } }, 'packages.cargo', /unknown package ecosystem/);
  refuses(t, 'not an object', 'body');
  refuses(t, null, 'body');
});

t.test('scalar fields', async (t) => {
  refuses(t, { ...base, name: '' }, 'name');
  refuses(t, { ...base, name: '../x' }, 'name');
  refuses(t, { ...base, name: 'x'.repeat(limits.NAME_MAX_CHARS + 1) }, 'name');
  refuses(t, { ...base, runtime: 'py thon' }, 'runtime');
  refuses(t, { ...base, entrypoint: '   ' }, 'entrypoint', /blank/);
  refuses(t, { ...base, entrypoint: 'a\0b' }, 'entrypoint', /NUL/);
  refuses(t, { ...base, entrypoint: 'x'.repeat(limits.ENTRYPOINT_MAX_BYTES + 1) }, 'entrypoint');
  refuses(t, { ...base, data_classification: 'secret' }, 'data_classification');
  refuses(t, { ...base, default_ttl: 0 }, 'default_ttl');
  refuses(t, { ...base, default_ttl: 1.5 }, 'default_ttl');
  refuses(t, { ...base, default_ttl: '300' }, 'default_ttl', /expected number/);
  refuses(t, { ...base, memory_mb: limits.MEMORY_MB_MAX + 1 }, 'memory_mb');
  refuses(t, { ...base, tls_ocsp_check: 'yes' }, 'tls_ocsp_check');
  for (const c of ['general', 'PHI', 'PII', 'financial', 'credentials'])
    t.equal(parseDefinition({ ...base, data_classification: c }).data_classification, c);
});

t.test('env_vars, packages, mcp_policy, TLS and signing shapes', async (t) => {
  t.same(parseDefinition({ ...base, env_vars: { A_1: 'x', _B: '' } }).env_vars, { A_1: 'x', _B: '' });
  refuses(t, { ...base, env_vars: { '1A': 'x' } }, 'env_vars.1A', /environment variable names/);
  refuses(t, { ...base, env_vars: { 'A-B': 'x' } }, 'env_vars.A-B');
  refuses(t, { ...base, env_vars: { A: 1 } }, 'env_vars.A');
  refuses(t, { ...base, env_vars: { A: 'x\0' } }, 'env_vars.A', /NUL/);
  refuses(
    t,
    {
      ...base,
      env_vars: Object.fromEntries(Array.from({ length: limits.ENV_VARS_MAX + 1 }, (_, i) => [`V${i}`, 'x'])),
    },
    'env_vars',
  );
  t.same(parseDefinition({ ...base, packages: { npm: ['@scope/pkg', 'left-pad'], pip: ['requests'] } }).packages, {
    npm: ['@scope/pkg', 'left-pad'],
    pip: ['requests'],
  });
  refuses(t, { ...base, packages: { pip: [] } }, 'packages.pip');
  refuses(t, { ...base, packages: { pip: ['a', 'a'] } }, 'packages.pip', /twice/);
  refuses(t, { ...base, packages: { pip: ['requests; rm -rf /'] } }, 'packages.pip.0');
  t.same(parseDefinition({ ...base, mcp_policy: { allowed_tools: [] } }).mcp_policy, { allowed_tools: [] });
  refuses(t, { ...base, mcp_policy: {} }, 'mcp_policy', /allowed_tools, prohibited_tools or both/);
  refuses(t, { ...base, mcp_policy: { allowed_tools: ['a', 'a'] } }, 'mcp_policy.allowed_tools', /twice/);
  refuses(
    t,
    { ...base, mcp_policy: { allowed_tools: ['x'], prohibited_tools: ['x'] } },
    'mcp_policy.prohibited_tools',
    /both allowed and prohibited/,
  );
  refuses(t, { ...base, mcp_policy: { prohibited_tools: ['bad tool'] } }, 'mcp_policy.prohibited_tools.0');
  const pin = { host: 'api.example.com', cert_sha256: 'a'.repeat(64) };
  t.same(parseDefinition({ ...base, tls_pinned_certs: [pin], tls_ocsp_check: true }).tls_pinned_certs, [pin]);
  refuses(
    t,
    { ...base, tls_pinned_certs: [{ ...pin, cert_sha256: 'A'.repeat(64) }] },
    'tls_pinned_certs.0.cert_sha256',
  );
  refuses(t, { ...base, tls_pinned_certs: [{ ...pin, host: '10.0.0.1' }] }, 'tls_pinned_certs.0.host');
  refuses(t, { ...base, tls_pinned_certs: [{ ...pin, port: 443 }] }, 'tls_pinned_certs.0.port', /unknown field/);
  refuses(
    t,
    { ...base, signing_config: { endpoint: 'http://signer.example.com' } },
    'signing_config.endpoint',
    /https/,
  );
  refuses(t, { ...base, signing_config: { endpoint: 'https://u:p@signer.example.com' } }, 'signing_config.endpoint');
  refuses(t, { ...base, signing_config: {} }, 'signing_config.endpoint', /is required/);
  const signing = {
    endpoint: 'https://signer.example.com',
    algorithm: 'Ed25519',
    public_key:
      '-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAL1zRTjvhYOEFn/HpUkqKnmvUCkEj8BWEbNG4JiKS2mo=\n-----END PUBLIC KEY-----\n',
  };
  refuses(t, { ...base, signing_config: { ...signing, algorithm: 'ECDSA' } }, 'signing_config.algorithm');
  refuses(
    t,
    { ...base, signing_config: { ...signing, public_key: 'ssh-ed25519 AAAA' } },
    'signing_config.public_key',
    /PEM/,
  );
  refuses(
    t,
    {
      ...base,
      signing_config: {
        ...signing,
        ca_cert:
          '-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAL1zRTjvhYOEFn/HpUkqKnmvUCkEj8BWEbNG4JiKS2mo=\n-----END PUBLIC KEY-----\n',
      },
    },
    'signing_config.ca_cert',
    /CERTIFICATE/,
  );
  t.ok(parseDefinition({ ...base, signing_config: signing }), 'endpoint, algorithm and public key; ca_cert optional');
});

t.test('egress entries: hostnames, IPs and CIDRs', async (t) => {
  const good: Record<string, string> = {
    'api.example.com': 'domain',
    localhost: 'domain',
    'xn--bcher-kva.example': 'domain',
    '203.0.113.7': 'ip_v4',
    '::1': 'ip_v6',
    '2001:db8::8a2e:370:7334': 'ip_v6',
    '::ffff:192.0.2.1': 'ip_v6',
    '10.0.0.0/8': 'cidr_v4',
    '0.0.0.0/0': 'cidr_v4',
    '192.0.2.1/32': 'cidr_v4',
    '1:2:3:4:5:6:7:8': 'ip_v6',
    '1::': 'ip_v6',
    'FE80::A': 'ip_v6',
    '64:ff9b::192.0.2.33': 'ip_v6',
    '2001:db8::/32': 'cidr_v6',
    '::/0': 'cidr_v6',
    '::ffff:192.0.2.0/120': 'cidr_v6',
    'fe80::1/128': 'cidr_v6',
  };
  for (const [e, kind] of Object.entries(good)) t.same(checkEgressEntry(e), { ok: true, kind }, e);
  const bad = [
    '',
    ' api.example.com',
    'API.example.com',
    '*.example.com',
    'api.example.com:443',
    'example.com.',
    'a..b',
    '-a.example',
    'a_b.example',
    '1.2.3.256',
    '999.1.1.1',
    '10.0.0.1/8',
    '10.0.0.0/33',
    '10.0.0.0/-1',
    '10.0.0.0/08',
    '2001:db8::1/32',
    '1::/129',
    'fe80::1%eth0',
    '1:2:3:4:5:6:7:8:9',
    '1:2:3:4:5:6:7',
    ':::1',
    '1::2::3',
    '12345::',
    'g::1',
    '::1.2.3.4.5',
    '::1.2.3.04',
    '1:2:3:4:5:6:7::8:9',
    '01.2.3.4',
    '1.2.3',
    '1.2.3.4.5',
    'https://api.example.com',
    'x'.repeat(64) + '.example',
    'a.example/8',
  ];
  for (const e of bad) t.equal(checkEgressEntry(e).ok, false, JSON.stringify(e));
  refuses(t, { ...base, egress_declaration: ['api.example.com', '10.0.0.1/8'] }, 'egress_declaration.1', /host bits/);
  refuses(t, { ...base, egress_declaration: ['a.example', 'a.example'] }, 'egress_declaration', /twice/);
  refuses(t, { ...base, egress_declaration: 'a.example' }, 'egress_declaration');
});

t.test('file names: plain names only; traversal, absolute, NUL, empty, oversized refused', async (t) => {
  for (const ok of ['main.py', '.env', 'a-b_c.d', 'x'.repeat(limits.FILENAME_MAX_CHARS)])
    t.equal(filenameProblem(ok), null, ok);
  const bad: Record<string, RegExp> = {
    '': /empty/,
    '../etc/passwd': /traversal/,
    'a/../../b': /traversal/,
    'a/./b': /traversal/,
    '..': /traversal/,
    '.': /traversal/,
    '..\\x': /traversal/,
    '/etc/passwd': /absolute/,
    'a\0b': /NUL/,
    'a\\b': /no directories/,
    'lib/helpers.py': /no directories/,
    'a//b': /no directories/,
    'caf\u00e9.py': /letters, digits/,
    'a b': /letters, digits/,
    ['x'.repeat(limits.FILENAME_MAX_CHARS + 1)]: /at most/,
  };
  for (const [name, why] of Object.entries(bad)) t.match(filenameProblem(name), why, JSON.stringify(name.slice(0, 40)));
});

t.test('file sizes: 0 bytes and over the bound are refused', async (t) => {
  t.match(fileSizeProblem(0), /empty/);
  t.equal(fileSizeProblem(1), null);
  t.equal(fileSizeProblem(limits.FILE_MAX_BYTES), null);
  t.match(fileSizeProblem(limits.FILE_MAX_BYTES + 1), /larger than/);
  t.match(fileSizeProblem(-1), /non-negative/);
});
