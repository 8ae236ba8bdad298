import t from 'tap';
import { createHash } from 'node:crypto';
import {
  canonicalContent,
  contentHash,
  DEFINITION_FIELDS,
  parseDefinition,
  type CapsulefileDefinition,
  type CapsulefileFileEntry,
} from '../../control-plane/capsulefile/index.js';
import { canonicalize } from '../../shared/proof/index.js';

const SIGNER_PUB =
  '-----BEGIN PUBLIC KEY-----\nMCowBQYDK2VwAyEAL1zRTjvhYOEFn/HpUkqKnmvUCkEj8BWEbNG4JiKS2mo=\n-----END PUBLIC KEY-----\n';
const sha = (s: string): string => `sha512:${createHash('sha512').update(s).digest('hex')}`;

const full: CapsulefileDefinition = parseDefinition({
  name: 'claims-scrubber',
  runtime: 'python3',
  entrypoint: 'python3 /capsule/app/main.py',
  data_classification: 'PHI',
  egress_declaration: ['api.example.com', '203.0.113.7', '10.20.0.0/16', '2001:db8::/32'],
  default_ttl: 600,
  memory_mb: 512,
  env_vars: { MODE: 'strict', LEVEL: '3' },
  packages: { apt: ['python3'], pip: ['requests'] },
  mcp_policy: { allowed_tools: ['search'], prohibited_tools: ['delete_record'] },
  tls_pinned_certs: [{ host: 'api.example.com', cert_sha256: 'ab'.repeat(32) }],
  tls_ocsp_check: true,
  signing_config: { endpoint: 'https://signer.example.com/sign', algorithm: 'Ed25519', public_key: SIGNER_PUB },
});
const files: CapsulefileFileEntry[] = [
  { filename: 'main.py', size_bytes: 9, sha512: sha('print(1)\n') },
  { filename: 'helpers.py', size_bytes: 4, sha512: sha('x=1\n') },
];

t.test('same inputs give the same hash; input key order and file order do not matter', async (t) => {
  const h = contentHash(full, files);
  t.match(h, /^sha512:[0-9a-f]{128}$/);
  t.equal(contentHash(full, files), h);
  const reordered = Object.fromEntries(Object.entries(full).reverse()) as CapsulefileDefinition;
  t.equal(contentHash(reordered, [...files].reverse()), h);
  t.equal(
    contentHash(structuredClone(full), structuredClone(files)),
    h,
    'a deep copy (as from a database) hashes the same',
  );
});

t.test('every definition field changes the hash', async (t) => {
  const base = contentHash(full, files);
  const variants: Record<(typeof DEFINITION_FIELDS)[number], unknown> = {
    name: 'claims-scrubber2',
    runtime: 'python3.12',
    entrypoint: 'python3 /capsule/app/main.py --x',
    data_classification: 'PII',
    egress_declaration: ['api.example.com'],
    default_ttl: 601,
    memory_mb: 513,
    env_vars: { MODE: 'strict', LEVEL: '4' },
    packages: { apt: ['python3'], pip: ['requests', 'idna'] },
    mcp_policy: { allowed_tools: ['search'] },
    tls_pinned_certs: [{ host: 'api.example.com', cert_sha256: 'cd'.repeat(32) }],
    tls_ocsp_check: false,
    signing_config: { endpoint: 'https://signer.example.com/sign2', algorithm: 'Ed25519', public_key: SIGNER_PUB },
  };
  const seen = new Set([base]);
  for (const f of DEFINITION_FIELDS) {
    const h = contentHash(parseDefinition({ ...full, [f]: variants[f] }), files);
    t.notOk(seen.has(h), `${f} changed the hash`);
    seen.add(h);
  }
  // Declaring an optional field versus leaving it out also changes the hash.
  const { tls_ocsp_check: _omit, ...withoutOcsp } = full;
  t.not(contentHash(withoutOcsp, files), base, 'omitting a field changes the hash');
  t.not(
    contentHash({ ...full, egress_declaration: [...(full.egress_declaration ?? [])].reverse() }, files),
    base,
    'list order is significant',
  );
});

t.test('every file attribute changes the hash', async (t) => {
  const base = contentHash(full, files);
  const [a, b] = files as [CapsulefileFileEntry, CapsulefileFileEntry];
  const cases: Record<string, CapsulefileFileEntry[]> = {
    'file renamed': [{ ...a, filename: 'main2.py' }, b],
    'file size': [{ ...a, size_bytes: 10 }, b],
    'file digest': [{ ...a, sha512: sha('print(2)\n') }, b],
    'file removed': [a],
    'file added': [...files, { filename: 'README', size_bytes: 1, sha512: sha('\n') }],
  };
  for (const [why, fs] of Object.entries(cases)) t.not(contentHash(full, fs), base, why);
});

t.test('the canonical form is the documented fixed object', async (t) => {
  const minimal = parseDefinition({ name: 'demo', runtime: 'python3', entrypoint: 'python3 main.py' });
  const c = canonicalContent(minimal, [{ filename: 'main.py', size_bytes: 9, sha512: sha('print(1)\n') }]);
  t.same(Object.keys(c).sort(), ['definition', 'files', 'format']);
  t.equal(c['format'], 'capsulefile-content/v1');
  t.same(Object.keys(c['definition'] as object).sort(), [...DEFINITION_FIELDS].sort());
  // The worked example of docs/CAPSULEFILE.md, recomputed independently from the JCS text there.
  const text =
    '{"definition":{"data_classification":null,"default_ttl":null,"egress_declaration":null,"entrypoint":"python3 main.py","env_vars":null,"mcp_policy":null,"memory_mb":null,"name":"demo","packages":null,"runtime":"python3","signing_config":null,"tls_ocsp_check":null,"tls_pinned_certs":null},"files":[{"filename":"main.py","sha512":"' +
    sha('print(1)\n') +
    '","size_bytes":9}],"format":"capsulefile-content/v1"}';
  t.equal(canonicalize(c), text);
  t.equal(contentHash(minimal, [{ filename: 'main.py', size_bytes: 9, sha512: sha('print(1)\n') }]), sha(text));
  t.equal(
    sha(text),
    'sha512:2af36d51bcd4ac14b80ee8fd4bbf61180c17421407f8573c078358d252299d43679b032b3030ce48cd9dcdf746f70f46dc031ccf3951e93dabac430782c943df',
    'documented example value',
  );
});

t.test('bad file entries are refused naming the entry', async (t) => {
  const ok = files[0] as CapsulefileFileEntry;
  t.throws(() => contentHash(full, [ok, { ...ok }]), {
    code: 'invalid_parameters',
    message: /files\.1\.filename: .*listed twice/,
  });
  t.throws(() => contentHash(full, [{ ...ok, filename: '../x' }]), { message: /files\.0\.filename: .*traversal/ });
  t.throws(() => contentHash(full, [{ ...ok, size_bytes: 0 }]), { message: /files\.0\.size_bytes: .*empty/ });
  t.throws(() => contentHash(full, [{ ...ok, sha512: 'sha512:XYZ' }]), { message: /files\.0\.sha512/ });
  t.throws(() => contentHash({ ...full, bogus: 1 } as CapsulefileDefinition, files), {
    message: /^bogus: unknown field/,
  });
});

t.test('lone surrogates are refused before hashing', async (t) => {
  t.throws(() => parseDefinition({ name: 'a', runtime: 'b', entrypoint: 'echo \ud800' }), {
    code: 'invalid_parameters',
    message: /^entrypoint: must be well-formed Unicode/,
  });
  t.throws(() => parseDefinition({ name: 'a', runtime: 'b', entrypoint: 'x', env_vars: { A: 'x\udc00' } }), {
    message: /^env_vars\.A: must be well-formed/,
  });
  t.equal(
    parseDefinition({ name: 'a', runtime: 'b', entrypoint: 'echo \ud83d\ude00' }).entrypoint,
    'echo \u{1F600}',
    'a surrogate pair is fine',
  );
});
