// The system Capsulefiles' batch runners, run directly with this machine's
// python3 and Node (the capsule image has python3 and node 20 in its prefix).
import t from 'tap';
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';

const dir = fileURLToPath(new URL('../../../policies/system-capsulefiles/', import.meta.url));
const runners: [string, string, string][] = [
  ['python3', 'python3', join(dir, 'python3-batch/batch.py')],
  ['node (project Node 24)', process.execPath, join(dir, 'node-batch/batch.mjs')],
];
if (existsSync('/usr/bin/node'))
  runners.push(['node (system, as in the capsule)', '/usr/bin/node', join(dir, 'node-batch/batch.mjs')]);

type Result = {
  custom_id: string | null;
  status: string;
  output: { sha512: string; characters: number; words: number } | null;
  error_code: string | null;
  error_message: string | null;
};

const work = mkdtempSync(join(tmpdir(), 'capsulefile-batch-'));
t.teardown(() => rmSync(work, { recursive: true, force: true }));

// 10,000 input lines: good records (CRLF and LF, escaped and raw non-ASCII), and every kind of bad line.
const lines: Buffer[] = [];
const good = new Map<string, string>();
for (let i = 0; i < 10_000; i++) {
  const k = i % 1000;
  if (k === 7) lines.push(Buffer.from('{not json\n'));
  else if (k === 8) lines.push(Buffer.from([0xff, 0xfe, 0x20, 0x62, 0x0a]));
  else if (k === 9) lines.push(Buffer.from('[1,2]\n'));
  else if (k === 10) lines.push(Buffer.from('{"custom_id": 5, "input": "x"}\n'));
  else if (k === 11) lines.push(Buffer.from(`{"custom_id": "r${i}", "input": 7}\n`));
  else if (k === 12) lines.push(Buffer.from(`{"custom_id": "r${i}", "input": "\\ud800"}\n`));
  else if (k === 13) lines.push(Buffer.from('   \n'));
  else if (k === 14) lines.push(Buffer.from('NaN\n'));
  else {
    const input = `h\u00e9llo w\u00f6rld \u{1F600}\t${'x'.repeat(i % 50)} `.repeat((i % 5) + 1);
    good.set(`r${i}`, input);
    const json =
      i % 2
        ? JSON.stringify({ custom_id: `r${i}`, input })
        : JSON.stringify({ input, custom_id: `r${i}` }).replace(
            /[\u0080-\uffff]/g,
            (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`,
          );
    lines.push(Buffer.from(json + (i % 3 ? '\n' : '\r\n')));
  }
}
lines.push(Buffer.from(`{"custom_id":"big","input":"${'a'.repeat(1 << 20)}"}\n`));
lines.push(Buffer.from('{"custom_id":"last","input":"no final newline"}'));
const input = join(work, 'records.jsonl');
writeFileSync(input, Buffer.concat(lines));

const outputs: Buffer[] = [];
for (const [label, exe, script] of runners) {
  t.test(`${label}: 10,000 records, malformed lines become errored results`, async (t) => {
    const out = join(work, `${label.replace(/\W+/g, '_')}.jsonl`);
    const started = process.hrtime.bigint();
    const r = spawnSync(exe, [script, input, out], { encoding: 'utf8' });
    const ms = Number(process.hrtime.bigint() - started) / 1e6;
    t.equal(r.status, 0, r.stderr);
    t.equal(r.stderr, '');
    t.comment(`${label}: ${ms.toFixed(0)} ms for ${lines.length} lines`);
    t.ok(ms < 20_000, 'fast (streaming)');
    const bytes = readFileSync(out);
    outputs.push(bytes);
    const results = bytes
      .toString('utf8')
      .trimEnd()
      .split('\n')
      .map((l) => JSON.parse(l) as Result);
    t.equal(results.length, 10_000 - 10 + 2, 'one result per non-blank line');
    t.same(JSON.parse(r.stdout), { records: results.length, succeeded: good.size + 1, errored: 10 * 7 + 1 });
    t.ok(
      results.every((res) => Object.keys(res).join() === 'custom_id,status,output,error_code,error_message'),
      'every result has exactly the convention fields',
    );
    const byId = new Map(results.filter((x) => x.custom_id !== null).map((x) => [x.custom_id, x]));
    let checked = 0;
    for (const [id, text] of good) {
      const res = byId.get(id);
      if (!res || res.status !== 'succeeded' || !res.output) continue;
      if (
        res.output.sha512 === createHash('sha512').update(text, 'utf8').digest('hex') &&
        res.output.characters === [...text].length &&
        res.output.words === text.split(/[ \t\n\r\f\v]+/).filter(Boolean).length
      )
        checked++;
    }
    t.equal(checked, good.size, 'every good record has the right output');
    const codes = (code: string) => results.filter((x) => x.error_code === code);
    t.equal(codes('invalid_json').length, 20, 'not JSON (including NaN)');
    t.equal(codes('invalid_encoding').length, 10);
    t.equal(codes('invalid_record').length, 20);
    t.equal(codes('invalid_input').length, 20);
    t.equal(codes('record_too_large').length, 1);
    t.same(
      results.find((x) => x.error_code === 'invalid_json'),
      {
        custom_id: null,
        status: 'errored',
        output: null,
        error_code: 'invalid_json',
        error_message: 'line 8: not valid JSON',
      },
    );
    t.same(byId.get('r11'), {
      custom_id: 'r11',
      status: 'errored',
      output: null,
      error_code: 'invalid_input',
      error_message: 'input must be a string',
    });
    t.equal(results.at(-1)?.custom_id, 'last');
    t.notMatch(
      bytes.toString('utf8'),
      /\{not json|xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx/,
      'errors never echo record content',
    );
  });

  t.test(`${label}: unreadable input exits 1 with one line and no output`, async (t) => {
    const out = join(work, 'never.jsonl');
    const r = spawnSync(exe, [script, join(work, 'missing.jsonl'), out], { encoding: 'utf8' });
    t.equal(r.status, 1);
    t.match(r.stderr, /^batch: .*missing\.jsonl: /);
    t.equal(r.stderr.trim().split('\n').length, 1);
    t.notOk(existsSync(out));
  });
}

t.test('python3 and node produce byte-identical results', async (t) => {
  t.ok(outputs.length >= 2);
  for (const o of outputs.slice(1)) t.ok(o.equals(outputs[0] as Buffer));
});
