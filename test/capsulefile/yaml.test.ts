import t from 'tap';
import { readFileSync, readdirSync } from 'node:fs';
import { fileURLToPath } from 'node:url';
import { ApiError } from '../../shared/errors.js';
import { parseCapsulefileYaml } from '../../control-plane/capsulefile/index.js';

const enc = (s: string): Uint8Array => new TextEncoder().encode(s);
const head = 'name: demo\nruntime: python3\nentrypoint: python3 main.py\n';

/** The error of parsing `src`, asserting it is invalid_parameters. */
function failure(src: string | Uint8Array): { message: string; field: unknown; line: unknown } {
  try {
    parseCapsulefileYaml(typeof src === 'string' ? enc(src) : src);
  } catch (err) {
    if (!(err instanceof ApiError) || err.code !== 'invalid_parameters') throw err;
    return { message: err.message, field: err.extra['field'], line: err.extra['line'] };
  }
  throw new Error('parsed without error');
}

t.test('a full Capsulefile.yaml parses to the definition and the file list', async (t) => {
  const src = `${head}data_classification: PHI
egress_declaration: [api.example.com, 10.0.0.0/8]
default_ttl: 600
memory_mb: 512
env_vars:
  MODE: "strict"
packages:
  apt: [python3]
mcp_policy:
  allowed_tools: [search]
signing_config:
  endpoint: https://signer.example.com/sign
  algorithm: Ed25519
  public_key: |
    -----BEGIN PUBLIC KEY-----
    MCowBQYDK2VwAyEAL1zRTjvhYOEFn/HpUkqKnmvUCkEj8BWEbNG4JiKS2mo=
    -----END PUBLIC KEY-----
files:
  - main.py
  - helpers.py
`;
  const r = parseCapsulefileYaml(enc(src));
  t.same(r.files, ['main.py', 'helpers.py']);
  t.same(r.definition, {
    name: 'demo',
    runtime: 'python3',
    entrypoint: 'python3 main.py',
    data_classification: 'PHI',
    egress_declaration: ['api.example.com', '10.0.0.0/8'],
    default_ttl: 600,
    memory_mb: 512,
    env_vars: { MODE: 'strict' },
    packages: { apt: ['python3'] },
    mcp_policy: { allowed_tools: ['search'] },
    signing_config: {
      endpoint: 'https://signer.example.com/sign',
      algorithm: 'Ed25519',
      public_key:
        '-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAL1zRTjvhYOEFn/HpUkqKnmvUCkEj8BWEbNG4JiKS2mo=\n-----END PUBLIC KEY-----\n',
    },
  });
  t.same(parseCapsulefileYaml(enc(`\ufeff${head}`)).files, [], 'a UTF-8 BOM is accepted; files are optional');
});

t.test('schema errors name the line and the field', async (t) => {
  const cases: [string, string, number, RegExp][] = [
    [`${head}memory_mb: lots\n`, 'memory_mb', 4, /expected number/],
    [`${head}\n\nbogus: 1\n`, 'bogus', 6, /unknown field/],
    [`${head}env_vars:\n  GOOD: "1"\n  1BAD: x\n`, 'env_vars.1BAD', 6, /environment variable names/],
    [`${head}env_vars:\n  PORT: 8080\n`, 'env_vars.PORT', 5, /expected string/],
    [`${head}egress_declaration:\n  - api.example.com\n  - 10.0.0.1/8\n`, 'egress_declaration.1', 6, /host bits/],
    [`${head}mcp_policy:\n  allowed_tools: [a]\n  denied: [b]\n`, 'mcp_policy.denied', 6, /unknown field/],
    [`${head}packages:\n  cargo: [serde]\n`, 'packages.cargo', 5, /unknown package ecosystem/],
    [`name: demo\nentrypoint: x\n`, 'runtime', 1, /is required/],
    [`${head}files:\n  - ok.py\n  - ../../etc/passwd\n`, 'files.1', 6, /traversal/],
    [`${head}files:\n  - /etc/passwd\n`, 'files.0', 5, /absolute/],
    [`${head}files:\n  - lib/x.py\n`, 'files.0', 5, /no directories/],
    [`${head}files:\n  - a.py\n  - a.py\n`, 'files.1', 6, /listed twice/],
    [`${head}files: main.py\n`, 'files', 4, /list/],
    [`${head}files:\n  - 7\n`, 'files.0', 5, /string/],
  ];
  for (const [src, field, line, why] of cases) {
    const f = failure(src);
    t.equal(f.field, field, `field of ${JSON.stringify(src.slice(head.length))}`);
    t.equal(f.line, line, `line of ${field}`);
    t.ok(f.message.startsWith(`Capsulefile.yaml line ${line}: ${field}: `), f.message);
    t.match(f.message, why);
  }
});

t.test('TLS fields are API-only: refused in YAML with the line', async (t) => {
  let f = failure(`${head}tls_ocsp_check: true\n`);
  t.equal(f.field, 'tls_ocsp_check');
  t.equal(f.line, 4);
  t.match(f.message, /API only/);
  f = failure(`${head}tls_pinned_certs:\n  - host: a.example\n    cert_sha256: ${'a'.repeat(64)}\n`);
  t.equal(f.field, 'tls_pinned_certs');
  t.match(f.message, /API only/);
});

t.test('YAML bombs: anchors and aliases are refused outright', async (t) => {
  const laughs = [
    'a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]',
    ...Array.from(
      { length: 8 },
      (_, i) =>
        `${String.fromCharCode(98 + i)}: &${String.fromCharCode(98 + i)} [*${String.fromCharCode(97 + i)},*${String.fromCharCode(97 + i)},*${String.fromCharCode(97 + i)},*${String.fromCharCode(97 + i)},*${String.fromCharCode(97 + i)},*${String.fromCharCode(97 + i)},*${String.fromCharCode(97 + i)},*${String.fromCharCode(97 + i)},*${String.fromCharCode(97 + i)}]`,
    ),
  ].join('\n');
  const started = process.hrtime.bigint();
  const f = failure(laughs);
  t.ok(process.hrtime.bigint() - started < 1_000_000_000n, 'refused quickly (no expansion)');
  t.match(f.message, /anchors/);
  t.equal(f.line, 1);
  t.match(failure(`${head}env_vars: &e {A: "1"}\n`).message, /line 4: env_vars: YAML anchors/);
  t.match(failure(`${head}x: &v "1"\nenv_vars: {A: *v}\n`).message, /anchors|aliases/);
  t.match(failure(`${head}<<: {memory_mb: 5}\n`).message, /unknown field/, 'merge keys are not special');
  t.match(failure(`${head}env_vars: {A: !!str 1}\n`).message, /line 4: env_vars\.A: YAML tags/);
  t.match(failure(`${head}name2: !custom x\n`).message, /line 4: .*tag/);
});

t.test('non-UTF-8, NUL, duplicate keys, multiple documents, nesting, size', async (t) => {
  const latin1 = new Uint8Array([...enc(head), ...enc('env_vars:\n  A: "caf'), 0xe9, ...enc('"\n')]);
  let f = failure(latin1);
  t.equal(f.line, 5);
  t.match(f.message, /not valid UTF-8/);
  f = failure(new Uint8Array([...enc('name: x\n'), 0xe2, 0x82]));
  t.match(f.message, /line 2: not valid UTF-8/, 'truncated sequence at the end');
  t.match(failure(`${head}env_vars: {A: "a\0"}\n`).message, /line 4: contains a NUL/);
  f = failure(`${head}memory_mb: 64\nmemory_mb: 128\n`);
  t.equal(f.field, 'memory_mb');
  t.equal(f.line, 5);
  t.match(f.message, /duplicate key/);
  t.match(failure(`${head}env_vars:\n  A: "1"\n  A: "2"\n`).message, /line 6: env_vars\.A: duplicate key/);
  t.match(failure(`${head}---\nname: other\n`).message, /single YAML document/);
  t.match(failure('- a\n- b\n').message, /top level must be a mapping/);
  t.match(failure('').message, /is empty/);
  t.match(failure('['.repeat(20000)).message, /nested too deeply|syntax/);
  t.match(failure(`${head}env_vars: ${'{a: '.repeat(20)}1${'}'.repeat(20)}\n`).message, /nested too deeply/);
  t.match(failure(`${head}# ${'x'.repeat(300 * 1024)}\n`).message, /larger than/);
  t.match(failure(`${head}{a: 1}: 2\n`).message, /keys must be plain strings/);
  t.match(failure(`${head}bad: [unclosed\n`).message, /YAML syntax error/);
  t.match(
    failure(`${head}env_vars: {A: "x\\ud800"}\n`).message,
    /line 4: env_vars\.A: must be well-formed Unicode/,
    'a lone surrogate escape',
  );
});

t.test('the system Capsulefiles parse', async (t) => {
  const dir = fileURLToPath(new URL('../../../policies/system-capsulefiles/', import.meta.url));
  const names = readdirSync(dir, { withFileTypes: true })
    .filter((d) => d.isDirectory())
    .map((d) => d.name);
  t.ok(names.length >= 2);
  for (const n of names) {
    const r = parseCapsulefileYaml(readFileSync(`${dir}${n}/Capsulefile.yaml`));
    t.match(r.definition.name, /^system-/, n);
    t.ok(r.files.length >= 1);
  }
});
