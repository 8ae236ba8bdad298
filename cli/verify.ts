// `capsule verify [--json] [--trust-manifest FILE|URL] [--customer-key PEM] FILE...|-`
// Verifies proofs offline: one proof per file, a JSON-lines file of proofs,
// a destroy response or stored-proof record (its `cdp` and `audit_proof`),
// or a golden test vector. Exit 0 all verified, 1 any not verified, 2 usage
// or unreadable input (one-line message, never a stack trace).
import { closeSync, openSync, readFileSync, readSync, statSync } from 'node:fs';
import { createNodeCrypto } from '../shared/node/crypto-node.js';
import { customerKey, verifyCustomerSignature } from '../shared/node/customer-signature.js';
import {
  STAGE_NAMES,
  customerAttestationLine,
  verdictLine,
  type CustomerVerify,
  type TrustManifest,
  type VerifyResult,
} from '../shared/proof/index.js';
import {
  itemsOf,
  jsonErrorReason,
  validateManifest,
  verifyItems,
  type LineOutcome,
  type Verdict,
} from './verify-input.js';
import { verifyLines } from './verify-pool.js';

const USAGE = `usage: capsule verify [--json] [--trust-manifest FILE|URL] [--customer-key PEM] FILE...|-
  Verifies AuditProof documents offline (no network unless the manifest is a URL). FILE may hold one proof,
  JSON lines of proofs, a destroy response or stored-proof record (its cdp and
  audit_proof are verified), or a test vector {document, expect[, manifest]}
  (its own manifest is used unless --trust-manifest is given). "-" reads stdin.
  --json                 print one result object per line (the POST /v1/verify members)
  --trust-manifest FILE|URL  resolve managed-authority keys against this manifest (stage 6)
  --customer-key PEM     check the record's customer co-signatures with this public key
                         (Ed25519 or RSA); one document per file, not JSON lines
  Exit: 0 all verified, 1 any not verified (or a co-signature forged or not matching
  its event), 2 usage or unreadable input.
  A valid result means the AuditProof is verified (integrity of the document and
  its signature); it does not by itself prove that destruction happened on the host.
`;

/** Whole files above this are refused (JSON lines can be split). */
export const MAX_INPUT_BYTES = 256 * 1024 * 1024;

class InputError extends Error {}

interface Args {
  json: boolean;
  manifestPath?: string;
  customerKeyPath?: string;
  files: string[];
}

function parseArgs(argv: string[]): Args | string {
  const args: Args = { json: false, files: [] };
  for (let i = 0; i < argv.length; i++) {
    const a = argv[i]!;
    if (a === '--json') args.json = true;
    else if (a === '--trust-manifest' || a.startsWith('--trust-manifest=')) {
      const v = a === '--trust-manifest' ? argv[++i] : a.slice('--trust-manifest='.length);
      if (v === undefined || v === '') return '--trust-manifest needs a FILE or URL';
      if (args.manifestPath !== undefined) return '--trust-manifest given twice';
      args.manifestPath = v;
    } else if (a === '--customer-key' || a.startsWith('--customer-key=')) {
      const v = a === '--customer-key' ? argv[++i] : a.slice('--customer-key='.length);
      if (v === undefined || v === '') return '--customer-key needs a PEM file';
      if (args.customerKeyPath !== undefined) return '--customer-key given twice';
      args.customerKeyPath = v;
    } else if (a === '--') {
      args.files.push(...argv.slice(i + 1));
      break;
    } else if (a.startsWith('-') && a !== '-') return `unknown option ${a}`;
    else args.files.push(a);
  }
  if (args.files.length === 0) return 'no proof file given';
  if (args.files.filter((f) => f === '-').length > 1) return 'stdin ("-") can be read only once';
  return args;
}

/** Reads at most max + 1 bytes: a stream with no end (stdin, a FIFO, /dev/zero) is refused, never buffered without bound. */
function readBounded(fd: number, max: number): Buffer {
  const chunks: Buffer[] = [];
  let total = 0;
  while (total <= max) {
    const buf = Buffer.allocUnsafe(Math.min(1 << 20, max + 1 - total));
    const n = readSync(fd, buf, 0, buf.length, null);
    if (n === 0) break;
    chunks.push(buf.subarray(0, n));
    total += n;
  }
  return Buffer.concat(chunks, total);
}

function readText(path: string): string {
  let bytes: Buffer;
  try {
    if (path === '-') {
      bytes = readBounded(0, MAX_INPUT_BYTES);
    } else {
      const st = statSync(path);
      if (st.isDirectory()) throw new InputError(`${path}: is a directory, not a proof file`);
      if (!st.isFile() && !st.isFIFO() && !st.isCharacterDevice()) throw new InputError(`${path}: not a regular file`);
      if (st.size > MAX_INPUT_BYTES)
        throw new InputError(`${path}: larger than ${MAX_INPUT_BYTES / 1048576} MiB; split it into JSON-lines files`);
      if (st.isFile()) {
        bytes = readFileSync(path);
      } else {
        const fd = openSync(path, 'r');
        try {
          bytes = readBounded(fd, MAX_INPUT_BYTES);
        } finally {
          closeSync(fd);
        }
      }
    }
  } catch (err) {
    if (err instanceof InputError) throw err;
    const code = (err as NodeJS.ErrnoException).code;
    const what =
      code === 'ENOENT'
        ? 'no such file'
        : code === 'EACCES'
          ? 'permission denied'
          : code === 'EISDIR'
            ? 'is a directory, not a proof file'
            : `cannot read (${code ?? 'error'})`;
    throw new InputError(`${path === '-' ? 'stdin' : path}: ${what}`);
  }
  if (bytes.length > MAX_INPUT_BYTES)
    throw new InputError(`${label(path)}: larger than ${MAX_INPUT_BYTES / 1048576} MiB`);
  let text: string;
  try {
    text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: false }).decode(bytes);
  } catch {
    throw new InputError(`${label(path)}: not UTF-8 text, so not a JSON proof`);
  }
  if (text.trim() === '') throw new InputError(`${label(path)}: empty input, no proof to verify`);
  return text;
}

const label = (path: string) => (path === '-' ? 'stdin' : path);

/** The verdicts (or line errors) of one input, in order. */
async function verifyInput(
  path: string,
  manifest: TrustManifest | undefined,
  customer: CustomerVerify | undefined,
): Promise<LineOutcome[]> {
  const text = readText(path);
  const name = label(path);
  const crypto = createNodeCrypto({ cacheKeys: true });
  try {
    const value: unknown = JSON.parse(text);
    const settings = { crypto, ...(manifest ? { manifest } : {}), ...(customer ? { customer } : {}) };
    return [{ verdicts: verifyItems(itemsOf(value, name), settings) }];
  } catch (err) {
    if (!(err instanceof SyntaxError)) throw err;
    if (customer) throw new InputError(`${name}: --customer-key checks one document per file, not JSON lines`);
    // Not one JSON document: JSON lines, if its first line is JSON.
    const raw = text.split('\n');
    const lines: string[] = [];
    const labels: string[] = [];
    raw.forEach((l, i) => {
      if (l.trim() !== '') {
        lines.push(l);
        labels.push(`${name}:${i + 1}`);
      }
    });
    const first = lines[0]!;
    try {
      JSON.parse(first);
    } catch (e) {
      throw new InputError(`${name}: not valid JSON (${jsonErrorReason(lines.length > 1 ? e : err)})`);
    }
    if (lines.length === 1) throw new InputError(`${name}: not valid JSON (${jsonErrorReason(err)})`);
    return verifyLines(lines, labels, { cacheKeys: true, ...(manifest ? { manifest } : {}) });
  }
}

function describe(v: Verdict): string {
  const r: VerifyResult = v.result;
  if (r.valid) {
    const a = v.authority;
    const by = a
      ? `, authority ${a.signing_authority_id} v${a.signing_key_version}${a.key_resolved ? ' resolved' : ' not resolved (no --trust-manifest)'}`
      : '';
    const co = v.customer_attestations ? `; ${customerAttestationLine(v.customer_attestations)}` : '';
    return `${v.label}: ${verdictLine(r)} (${r.checks.step_count} steps, ${r.checks.algorithm}${by})${co}`;
  }
  const stage = STAGE_NAMES[r.stage_reached] ?? 'unknown';
  return `${v.label}: AuditProof NOT verified: stage ${r.stage_reached} (${stage}) failed: ${r.failure_reason.type}/${r.failure_reason.reason}`;
}

/** Bound of a trust manifest fetched over http(s). */
const MANIFEST_MAX_BYTES = 1024 * 1024;

/** Fetches a trust manifest URL (http or https), bounded in size and time. */
async function fetchManifestText(url: string): Promise<string> {
  let res: Response;
  try {
    res = await fetch(url, { signal: AbortSignal.timeout(15_000), redirect: 'follow' });
  } catch (err) {
    const cause = (err as { cause?: { code?: string } }).cause?.code ?? (err as Error).name;
    throw new InputError(`trust manifest ${url}: cannot fetch (${cause})`);
  }
  if (!res.ok) throw new InputError(`trust manifest ${url}: HTTP ${res.status}`);
  const chunks: Uint8Array[] = [];
  let total = 0;
  for await (const c of res.body ?? []) {
    total += (c as Uint8Array).length;
    if (total > MANIFEST_MAX_BYTES) throw new InputError(`trust manifest ${url}: larger than 1 MiB`);
    chunks.push(c as Uint8Array);
  }
  try {
    return new TextDecoder('utf-8', { fatal: true }).decode(Buffer.concat(chunks));
  } catch {
    throw new InputError(`trust manifest ${url}: not UTF-8 text`);
  }
}

/** The customer's public key (PEM) as a signature check for checkCustomerAttestations. */
function loadCustomerKey(path: string): CustomerVerify {
  let pem: Buffer;
  try {
    pem = readFileSync(path);
  } catch (err) {
    throw new InputError(`customer key ${path}: ${(err as NodeJS.ErrnoException).code ?? (err as Error).message}`);
  }
  const k = customerKey(pem);
  if (!k) throw new InputError(`customer key ${path}: not an Ed25519 or RSA public key in PEM`);
  return (algorithm, message, signature) =>
    algorithm === k.algorithm && verifyCustomerSignature(algorithm, k.key, message, signature);
}

async function loadManifest(path: string): Promise<TrustManifest> {
  const isUrl = /^https?:\/\//i.test(path);
  let value: unknown;
  try {
    value = JSON.parse(isUrl ? await fetchManifestText(path) : readText(path));
  } catch (err) {
    if (err instanceof InputError) throw isUrl ? err : new InputError(`trust manifest ${err.message}`);
    throw new InputError(`trust manifest ${path}: not valid JSON (${jsonErrorReason(err)})`);
  }
  const m = validateManifest(value);
  if (typeof m === 'string') throw new InputError(`${path}: ${m}`);
  return m;
}

export async function main(argv: string[]): Promise<number> {
  if (argv.includes('-h') || argv.includes('--help')) {
    process.stdout.write(USAGE);
    return 0;
  }
  const args = parseArgs(argv);
  if (typeof args === 'string') {
    process.stderr.write(`capsule verify: ${args}\n${USAGE}`);
    return 2;
  }
  let exit = 0;
  let verified = 0;
  let failedCount = 0;
  const out: string[] = [];
  const flush = () => {
    if (out.length) {
      process.stdout.write(out.join('\n') + '\n');
      out.length = 0;
    }
  };
  try {
    const manifest = args.manifestPath !== undefined ? await loadManifest(args.manifestPath) : undefined;
    const customer = args.customerKeyPath !== undefined ? loadCustomerKey(args.customerKeyPath) : undefined;
    for (const file of args.files) {
      let outcomes: LineOutcome[];
      try {
        outcomes = await verifyInput(file, manifest, customer);
      } catch (err) {
        if (!(err instanceof InputError)) throw err;
        flush();
        process.stderr.write(`capsule verify: ${err.message}\n`);
        exit = 2;
        continue;
      }
      for (const o of outcomes) {
        if ('error' in o) {
          flush();
          process.stderr.write(`capsule verify: ${o.error}\n`);
          exit = 2;
          continue;
        }
        for (const v of o.verdicts) {
          if (v.result.valid) verified++;
          else {
            failedCount++;
            if (exit === 0) exit = 1;
          }
          const co = v.customer_attestations;
          if (co && (co.forged.length > 0 || co.mismatched.length > 0) && exit === 0) exit = 1;
          out.push(
            args.json
              ? JSON.stringify({ ...v.result, ...(v.authority ?? {}), ...(co ? { customer_attestations: co } : {}) })
              : describe(v),
          );
          if (out.length >= 1000) flush();
        }
      }
    }
  } catch (err) {
    flush();
    process.stderr.write(`capsule verify: ${err instanceof Error ? err.message.split('\n')[0] : String(err)}\n`);
    return 2;
  }
  flush();
  if (!args.json && verified + failedCount > 1) {
    process.stdout.write(`${verified} AuditProof(s) verified, ${failedCount} not verified\n`);
  }
  return exit;
}
