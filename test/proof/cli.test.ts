// `capsule verify` as a user runs it: the built CLI spawned with this Node.
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, rmSync, openSync, writeSync, closeSync } from 'node:fs';
import { randomBytes } from 'node:crypto';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { CLI, proofVectors, vectorDoc, readJson } from './helpers.js';

const dir = mkdtempSync(join(tmpdir(), 'capsule-verify-cli-'));
t.teardown(() => rmSync(dir, { recursive: true, force: true }));

function run(args: string[], input?: string) {
  const r = spawnSync(process.execPath, [CLI, 'verify', ...args], {
    encoding: 'utf8',
    input,
    maxBuffer: 256 * 1024 * 1024,
  });
  return { code: r.status, out: r.stdout, err: r.stderr };
}

function noStack(t: any, s: string) {
  t.notMatch(s, /\n\s+at /, 'no stack trace');
  t.notMatch(s, /Error:/, 'no raw error');
}

function write(name: string, content: string | Buffer): string {
  const p = join(dir, name);
  writeFileSync(p, content);
  return p;
}

t.test('--json on every vector file prints its expect plus verified_at', async (t) => {
  for (const v of proofVectors()) {
    const r = run(['--json', v.path]);
    t.equal(r.code, v.expect['valid'] ? 0 : 1, `${v.name} exit code`);
    const lines = r.out.trim().split('\n');
    t.equal(lines.length, 1, `${v.name}: one line`);
    const got = JSON.parse(lines[0]!);
    t.match(got.verified_at, /^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z$/);
    delete got.verified_at;
    // A verified managed-authority proof also names its authority and key version (resolved by the vector's manifest).
    const doc = v.document as Record<string, unknown>;
    const authority =
      v.expect['valid'] && typeof doc['signing_authority_id'] === 'string'
        ? {
            signing_authority_id: doc['signing_authority_id'],
            signing_key_version: doc['signing_key_version'],
            key_resolved: true,
          }
        : {};
    t.strictSame(got, { ...v.expect, ...authority }, v.name);
  }
});

t.test('a bare proof document, and --trust-manifest', async (t) => {
  const vec = readJson('proofs/invalid-managed-unknown-authority.json');
  const doc = write('managed.json', JSON.stringify(vec.document, null, 2));
  t.equal(run([doc]).code, 0, 'without a manifest the managed proof verifies (stage 6 not run)');
  const manifest = write('manifest.json', JSON.stringify(vec.manifest));
  const r = run(['--json', '--trust-manifest', manifest, doc]);
  t.equal(r.code, 1);
  t.match(JSON.parse(r.out), {
    valid: false,
    stage_reached: 6,
    failure_reason: { type: 'KeyResolution', reason: 'UnknownAuthority' },
  });
  const good = write('good-manifest.json', JSON.stringify(readJson('proofs/valid-2.1-managed-resolves.json').manifest));
  t.equal(run([`--trust-manifest=${good}`, doc]).code, 0, 'a manifest listing the key resolves');
  const bad = write(
    'bad-manifest.json',
    JSON.stringify({
      authorities: [{ signing_authority_id: 'a', keys: [{ signing_key_version: 'x', public_key: 'k' }] }],
    }),
  );
  const rb = run(['--trust-manifest', bad, doc]);
  t.equal(rb.code, 2);
  t.match(rb.err, /signing_key_version must be an integer/);
  t.equal(rb.err.trim().split('\n').length, 1, 'one line');
  t.equal(run(['--trust-manifest', join(dir, 'nope.json'), doc]).code, 2);
});

t.test('human wording', async (t) => {
  const ok = run([proofVectors().find((v) => v.name === 'valid-2.1-record.json')!.path]);
  t.equal(ok.code, 0);
  t.match(ok.out, /AuditProof verified/);
  t.notMatch(ok.out, /destruction verified/i);
  const bad = run([proofVectors().find((v) => v.name === 'invalid-step-order.json')!.path]);
  t.equal(bad.code, 1);
  t.match(bad.out, /NOT verified: stage 2 \(chain\) failed: ChainMismatch\/StepOrder/);
  const partial = run([proofVectors().find((v) => v.name === 'valid-partial-signed.json')!.path]);
  t.match(partial.out, /AuditProof verified; partial proof/);
  const legacy = run([proofVectors().find((v) => v.name === 'valid-legacy-session.json')!.path]);
  t.match(legacy.out, /AuditProof verified at reduced scope; legacy session form: chain hashes .* not recomputed/);
});

t.test('JSON lines, several files, stdin', async (t) => {
  const good = JSON.stringify(vectorDoc('valid-2.1-record.json'));
  const bad = JSON.stringify(vectorDoc('invalid-final-hash.json'));
  const jl = write('batch.jsonl', [good, bad, '', good].join('\n') + '\n');
  const r = run(['--json', jl]);
  t.equal(r.code, 1);
  const rs = r.out
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  t.same(
    rs.map((x) => x.valid),
    [true, false, true],
  );
  t.equal(rs[1].failure_reason.type, 'FinalHashMismatch');
  const all = write('all.jsonl', [good, good].join('\n'));
  t.equal(run([all]).code, 0);
  const two = run(['--json', all, proofVectors().find((v) => v.name === 'valid-1.0.json')!.path]);
  t.equal(two.out.trim().split('\n').length, 3, 'results of several files, one per line');
  const s = run(['--json', '-'], good);
  t.equal(s.code, 0);
  t.equal(JSON.parse(s.out).valid, true);
  const sl = run(['-'], [good, bad].join('\n'));
  t.equal(sl.code, 1);
  t.match(sl.out, /stdin:1: AuditProof verified/);
  t.match(sl.out, /stdin:2: AuditProof NOT verified/);
  const broken = write('broken.jsonl', [good, '{"cdp_version":', good].join('\n'));
  const rb = run(['--json', broken]);
  t.equal(rb.code, 2, 'an unreadable line is exit 2');
  t.equal(rb.out.trim().split('\n').length, 2, 'the other lines still get results');
  t.match(rb.err, /broken\.jsonl:2: not valid JSON/);
  noStack(t, rb.err);
});

t.test('big JSON-lines batch runs on worker threads and keeps order', async (t) => {
  const good = JSON.stringify(vectorDoc('valid-2.1-record.json'));
  const bad = JSON.stringify(vectorDoc('invalid-subsystem.json'));
  const n = 2600;
  const lines = Array.from({ length: n }, (_, i) => (i === 1777 ? bad : good));
  const p = write('big.jsonl', lines.join('\n'));
  const r = run(['--json', p]);
  t.equal(r.code, 1);
  const rs = r.out
    .trim()
    .split('\n')
    .map((l) => JSON.parse(l));
  t.equal(rs.length, n);
  t.same(
    rs.map((x, i) => (x.valid ? -1 : i)).filter((i) => i >= 0),
    [1777],
    'the one invalid proof is reported at its line',
  );
});

t.test('destroy response and stored-proof record', async (t) => {
  const cdp = vectorDoc('valid-2.1-record.json');
  const { activity: _a, ...auditProof } = cdp;
  const destroy = write(
    'destroy.json',
    JSON.stringify({
      capsule_id: cdp.capsule_id,
      status: 'destroyed',
      destroyed_at: cdp.destroyed_at,
      cdp,
      audit_proof: auditProof,
    }),
  );
  const r = run(['--json', destroy]);
  t.equal(r.code, 0);
  t.equal(r.out.trim().split('\n').length, 2, 'cdp and audit_proof');
  const human = run([destroy]);
  t.match(human.out, /destroy\.json cdp: AuditProof verified/);
  t.match(human.out, /destroy\.json audit_proof: AuditProof verified/);
  const tampered = structuredClone(auditProof);
  tampered.capsule_context.jurisdiction = 'US';
  const stored = write(
    'stored.json',
    JSON.stringify({
      proof_id: 'prf_1',
      capsule_id: cdp.capsule_id,
      cdp: tampered,
      component_proofs: {},
      verified: true,
    }),
  );
  const rs = run(['--json', stored]);
  t.equal(rs.code, 1);
  t.match(JSON.parse(rs.out), { valid: false, stage_reached: 4 });
});

t.test('bad input: exit 2 with one clear line, never a stack trace', async (t) => {
  const cases: [string, string[], RegExp][] = [
    ['directory', [dir], /is a directory/],
    ['missing file', [join(dir, 'missing.json')], /no such file/],
    ['empty file', [write('empty.json', '')], /empty input/],
    ['whitespace file', [write('ws.json', '  \n\n ')], /empty input/],
    ['not JSON', [write('text.json', 'hello world')], /not valid JSON/],
    [
      'truncated proof',
      [write('trunc.json', JSON.stringify(vectorDoc('valid-2.0.json'), null, 2).slice(0, 900))],
      /not valid JSON/,
    ],
    ['binary', [write('bin.json', randomBytes(4096))], /not UTF-8|not valid JSON/],
    ['no file', [], /no proof file given/],
    ['unknown option', ['--fast', 'x'], /unknown option --fast/],
    ['stdin twice', ['-', '-'], /only once/],
    ['endless device', ['/dev/zero'], /larger than 256 MiB/],
  ];
  for (const [name, args, msg] of cases) {
    const r = run(args, '');
    t.equal(r.code, 2, `${name}: exit 2`);
    t.match(r.err, msg, `${name}: message`);
    noStack(t, r.err);
  }
  const r = run(['-'], '');
  t.equal(r.code, 2, 'empty stdin');
  t.match(r.err, /stdin: empty input/);
});

t.test('50 MB of garbage', async (t) => {
  const p = join(dir, 'garbage.bin');
  const fd = openSync(p, 'w');
  for (let i = 0; i < 50; i++) writeSync(fd, randomBytes(1024 * 1024));
  closeSync(fd);
  const r = run([p]);
  t.equal(r.code, 2);
  t.equal(r.err.trim().split('\n').length, 1);
  noStack(t, r.err);
  const q = write('garbage.txt', randomBytes(30 * 1024 * 1024).toString('base64'));
  const rq = run([q]);
  t.equal(rq.code, 2);
  t.match(rq.err, /not valid JSON/);
  t.ok(rq.err.length < 300, 'short message');
});

t.test('valid JSON that is not a proof gets a verdict', async (t) => {
  const r = run(['--json', write('arr.json', '[1,2,3]')]);
  t.equal(r.code, 1);
  t.match(JSON.parse(r.out), {
    valid: false,
    stage_reached: 0,
    failure_reason: { type: 'FormatInvalid', reason: 'NotAnObject' },
  });
  const deep = write('deep.json', '['.repeat(200000) + ']'.repeat(200000));
  const rd = run(['--json', deep]);
  t.ok(rd.code === 1 || rd.code === 2, 'deep nesting is a verdict or a clean error');
  noStack(t, rd.err);
  const deepObj = write(
    'deepobj.json',
    JSON.stringify({
      ...vectorDoc('valid-2.1-record.json'),
      capsule_context: JSON.parse('{"a":'.repeat(1000) + '1' + '}'.repeat(1000)),
    }),
  );
  const ro = run(['--json', deepObj]);
  t.equal(ro.code, 1);
  t.match(JSON.parse(ro.out), { valid: false, stage_reached: 0, failure_reason: { reason: 'WrongType' } });
});

t.test('help', async (t) => {
  const r = run(['--help']);
  t.equal(r.code, 0);
  t.match(r.out, /usage: capsule verify/);
});
