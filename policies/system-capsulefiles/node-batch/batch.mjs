#!/usr/bin/env node
// Reference batch runner following the SPEC batch convention (Node 20+).
// Reads JSON lines from /data/input/records.jsonl, writes one result per
// record to /data/output/results.jsonl. Record: {"custom_id": "<1-256 chars>",
// "input": "<text>"}; output: {"sha512": hex SHA-512 of the UTF-8 input,
// "characters": code points, "words": runs separated by ASCII whitespace}.
// Streams line by line with bounded memory; a bad line yields an "errored"
// result and the run goes on. Byte-for-byte the same results as
// ../python3-batch/batch.py. Usage: batch.mjs [INPUT [OUTPUT]]
import { createHash } from 'node:crypto';
import { createReadStream, createWriteStream, mkdirSync, openSync, rmSync } from 'node:fs';
import { dirname } from 'node:path';
import { once } from 'node:events';

const INPUT = '/data/input/records.jsonl';
const OUTPUT = '/data/output/results.jsonl';
const MAX_LINE_BYTES = 1 << 20; // a longer line is one errored result, never a memory spike
const CUSTOM_ID_MAX_CHARS = 256;
const ASCII_WS = /[ \t\n\r\f\v]+/;
const SURROGATE = /\p{Cs}/u; // matches only lone surrogates under the u flag

const result = (customId, output = null, code = null, message = null) => ({
  custom_id: customId,
  status: code === null ? 'succeeded' : 'errored',
  output,
  error_code: code,
  error_message: message,
});

const utf8 = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true });

/** One result for one physical line (bytes without the newline), or null for a blank line. */
function processLine(raw, lineno) {
  let text;
  try {
    text = utf8.decode(raw);
  } catch {
    return result(null, null, 'invalid_encoding', `line ${lineno}: not valid UTF-8`);
  }
  if (text.replace(/[ \t\r\n]/g, '') === '') return null;
  let rec;
  try {
    rec = JSON.parse(text);
  } catch {
    return result(null, null, 'invalid_json', `line ${lineno}: not valid JSON`);
  }
  if (rec === null || typeof rec !== 'object' || Array.isArray(rec)) {
    return result(null, null, 'invalid_record', `line ${lineno}: a record must be a JSON object`);
  }
  const cid = rec.custom_id;
  if (typeof cid !== 'string' || cid === '' || [...cid].length > CUSTOM_ID_MAX_CHARS || SURROGATE.test(cid)) {
    return result(null, null, 'invalid_record', `line ${lineno}: custom_id must be a string of 1 to ${CUSTOM_ID_MAX_CHARS} characters`);
  }
  const data = rec.input;
  if (typeof data !== 'string') return result(cid, null, 'invalid_input', 'input must be a string');
  if (SURROGATE.test(data)) return result(cid, null, 'invalid_input', 'input is not well-formed Unicode');
  return result(cid, {
    sha512: createHash('sha512').update(data, 'utf8').digest('hex'),
    characters: [...data].length,
    words: data.split(ASCII_WS).filter((w) => w !== '').length,
  });
}

/** Yields [line number, bytes or null when too long], streaming with bounded memory. */
async function* lines(path) {
  let parts = [];
  let size = 0;
  let tooLong = false;
  let lineno = 0;
  const finish = () => {
    lineno++;
    let raw = null;
    if (!tooLong) {
      raw = parts.length === 1 ? parts[0] : Buffer.concat(parts, size);
      if (raw.length > 0 && raw[raw.length - 1] === 0x0d) raw = raw.subarray(0, raw.length - 1);
    }
    parts = [];
    size = 0;
    tooLong = false;
    return [lineno, raw];
  };
  for await (const chunk of createReadStream(path, { highWaterMark: 1 << 16 })) {
    let start = 0;
    for (let nl = chunk.indexOf(0x0a); nl !== -1; nl = chunk.indexOf(0x0a, start)) {
      const piece = chunk.subarray(start, nl);
      if (!tooLong) {
        size += piece.length;
        if (size > MAX_LINE_BYTES) tooLong = true;
        else parts.push(piece);
      }
      start = nl + 1;
      yield finish();
    }
    if (start < chunk.length && !tooLong) {
      const piece = chunk.subarray(start);
      size += piece.length;
      if (size > MAX_LINE_BYTES) {
        tooLong = true;
        parts = [];
      } else {
        parts.push(Buffer.from(piece)); // copy: the stream may reuse its chunk
      }
    }
  }
  if (size > 0 || tooLong) yield finish();
}

async function main(argv) {
  const src = argv[2] ?? INPUT;
  const dst = argv[3] ?? OUTPUT;
  const counts = { records: 0, succeeded: 0, errored: 0 };
  // Written in place (the capsule's seccomp policy may refuse rename(2)); on
  // an I/O failure the half-written file is removed: whole or not at all.
  try {
    mkdirSync(dirname(dst), { recursive: true });
    // Opened synchronously: an async open could create the file after the
    // failure path below removed it, leaving an empty output behind.
    const out = createWriteStream(dst, { fd: openSync(dst, 'w'), highWaterMark: 1 << 16 });
    const failed = new Promise((_, reject) => out.once('error', reject));
    failed.catch(() => undefined);
    let pending = '';
    const flush = async () => {
      if (!out.write(pending)) await Promise.race([once(out, 'drain'), failed]);
      pending = '';
    };
    for await (const [lineno, raw] of lines(src)) {
      const r = raw === null
        ? result(null, null, 'record_too_large', `line ${lineno}: longer than ${MAX_LINE_BYTES} bytes`)
        : processLine(raw, lineno);
      if (r === null) continue;
      counts.records++;
      counts[r.status]++;
      pending += `${JSON.stringify(r)}\n`;
      if (pending.length >= 1 << 16) await flush();
    }
    await flush();
    out.end();
    await Promise.race([once(out, 'finish'), failed]);
  } catch (err) {
    // The path and the OS reason only: never record content.
    process.stderr.write(`batch: ${err?.path ?? src}: ${err?.code ?? 'failed'}\n`);
    rmSync(dst, { force: true });
    return 1;
  }
  process.stdout.write(`${JSON.stringify(counts)}\n`);
  return 0;
}

process.exitCode = await main(process.argv);
