// `capsule run [--capsulefile ID|DIR] [--upload FILE…] [--input FILE] [--out DIR] [--json] -- COMMAND`
// One capsule from start to proof: create, upload, exec, download every
// output file (SHA-512 checked against X-Svc-File-Sha512), destroy, verify the
// AuditProof offline, write it next to the outputs, print a summary.
// The API key comes from CAPSULE_API_KEY or the config file, never from argv
// (argv is visible to every user of the machine). Ctrl-C destroys the capsule
// and still saves its proof. Exit: 0 command succeeded and proof verified,
// 1 otherwise, 2 usage or configuration, 130 interrupted.
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { basename, join, resolve } from 'node:path';
import { CapsuleClient, CapsuleError, verdictLine, verifyProof } from '../clients/typescript/src/index.js';
import type { DestroyResult, ExecResult } from '../clients/typescript/src/index.js';
import { Failure, loadSource } from './capsulefile.js';
import { ConfigProblem, credentials } from './run/config.js';

const USAGE = `usage: capsule run [--capsulefile ID|DIR] [--upload FILE…] [--input FILE] [--out DIR] [--json] [--ttl S] -- COMMAND
  --capsulefile  a finalized Capsulefile id (cf_…), or a directory with Capsulefile.yaml to push first
  --upload       files copied to /data/input/<name> before the command runs
  --input        a text file given to the command as /data/input/data (at most 512 KB)
  --out          where output files and audit-proof.json go (default ./capsule-out-<capsule id>)
  --json         one JSON summary on stdout, no progress
The service and key come from CAPSULE_BASE_URL and CAPSULE_API_KEY, or from the
config file (CAPSULE_CONFIG, default ~/.config/capsule/config.json: {"base_url", "api_key"}).
`;

interface Args {
  capsulefile?: string;
  uploads: string[];
  input?: string;
  out?: string;
  json: boolean;
  ttl?: number;
  command: string;
}

class Usage extends Error {}

function parseArgs(argv: string[]): Args {
  const dash = argv.indexOf('--');
  const opts = dash === -1 ? argv : argv.slice(0, dash);
  const command = dash === -1 ? '' : argv.slice(dash + 1).join(' ');
  const a: Args = { uploads: [], json: false, command };
  for (let i = 0; i < opts.length; i++) {
    const o = opts[i]!;
    const value = (): string => {
      const v = opts[++i];
      if (v === undefined || v.startsWith('--')) throw new Usage(`${o}: expected a value`);
      return v;
    };
    if (o === '--api-key' || o.startsWith('--api-key=') || o === '--key')
      throw new Usage('the API key is read from CAPSULE_API_KEY or the config file, never from the command line');
    else if (o === '--capsulefile') a.capsulefile = value();
    else if (o === '--upload') {
      a.uploads.push(value());
      while (opts[i + 1] !== undefined && !opts[i + 1]!.startsWith('--')) a.uploads.push(opts[++i]!);
    } else if (o === '--input') a.input = value();
    else if (o === '--out') a.out = value();
    else if (o === '--json') a.json = true;
    else if (o === '--ttl') {
      const n = Number(value());
      if (!Number.isInteger(n) || n < 1) throw new Usage('--ttl: expected seconds');
      a.ttl = n;
    } else if (o === '-h' || o === '--help') throw new Usage('');
    else throw new Usage(`unknown option ${JSON.stringify(o)}`);
  }
  if (!a.command.trim() && !a.capsulefile)
    throw new Usage('give a command after --, or a --capsulefile with an entrypoint');
  return a;
}

/** Progress on stderr, only when stdout is a terminal and --json is off. */
class Progress {
  private timer: NodeJS.Timeout | undefined;
  constructor(private readonly on: boolean) {}
  line(text: string): void {
    if (this.on) process.stderr.write(`\r\x1b[K${text}\n`);
  }
  bar(label: string, done: number, total: number): void {
    if (!this.on) return;
    const width = 24;
    const filled = total > 0 ? Math.round((done / total) * width) : width;
    process.stderr.write(
      `\r\x1b[K${label} [${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${fmtBytes(done)}/${fmtBytes(total)}`,
    );
    if (done >= total) process.stderr.write('\n');
  }
  spin(label: string): void {
    if (!this.on) return;
    const frames = ['|', '/', '-', '\\'];
    let i = 0;
    const started = Date.now();
    this.timer = setInterval(() => {
      process.stderr.write(`\r\x1b[K${frames[i++ % 4]} ${label} ${((Date.now() - started) / 1000).toFixed(1)} s`);
    }, 100);
  }
  stop(): void {
    if (this.timer) clearInterval(this.timer);
    this.timer = undefined;
    if (this.on) process.stderr.write('\r\x1b[K');
  }
}

const fmtBytes = (n: number): string =>
  n < 1024 ? `${n} B` : n < 1024 ** 2 ? `${(n / 1024).toFixed(1)} KB` : `${(n / 1024 ** 2).toFixed(1)} MB`;

interface Summary {
  capsule_id: string | null;
  interrupted: boolean;
  exit_code: number | null;
  timed_out: boolean | null;
  duration_ms: number | null;
  stdout: string;
  stderr: string;
  files: { filename: string; size_bytes: number; sha512: string; path: string }[];
  proof_path: string | null;
  verified: boolean | null;
  verdict: string | null;
  error: string | null;
}

function render(s: Summary): string {
  const tail = (text: string, n: number) => {
    const lines = text.replace(/\n$/, '').split('\n');
    return (lines.length > n ? [`… (${lines.length - n} earlier lines)`, ...lines.slice(-n)] : lines).join('\n    ');
  };
  const out = [`capsule   ${s.capsule_id ?? '(not created)'}${s.interrupted ? '  (interrupted: destroyed)' : ''}`];
  if (s.exit_code !== null || s.timed_out)
    out.push(`command   exit ${s.exit_code}${s.timed_out ? ' (timed out)' : ''} in ${s.duration_ms} ms`);
  if (s.stdout) out.push(`stdout    ${tail(s.stdout, 8)}`);
  if (s.stderr) out.push(`stderr    ${tail(s.stderr, 4)}`);
  for (const f of s.files) out.push(`output    ${f.path} (${fmtBytes(f.size_bytes)}, SHA-512 checked)`);
  if (s.proof_path) out.push(`proof     ${s.proof_path}`);
  if (s.verdict) out.push(`verdict   ${s.verdict}`);
  if (s.error) out.push(`error     ${s.error}`);
  return out.join('\n') + '\n';
}

export async function main(argv: string[]): Promise<number> {
  let args: Args;
  let creds: { baseUrl: string; apiKey: string };
  try {
    args = parseArgs(argv);
    creds = credentials();
  } catch (e) {
    if (e instanceof ConfigProblem) {
      process.stderr.write(`capsule run: ${e.message}\n`);
      return 2;
    }
    if (!(e instanceof Usage)) throw e;
    process.stderr.write(e.message ? `capsule run: ${e.message}\n${USAGE}` : USAGE);
    return e.message ? 2 : 0;
  }
  const progress = new Progress(process.stdout.isTTY === true && !args.json);
  const client = new CapsuleClient({ ...creds });
  const abort = new AbortController();
  const summary: Summary = {
    capsule_id: null,
    interrupted: false,
    exit_code: null,
    timed_out: null,
    duration_ms: null,
    stdout: '',
    stderr: '',
    files: [],
    proof_path: null,
    verified: null,
    verdict: null,
    error: null,
  };
  let destroyed: DestroyResult | null = null;
  let destroying: Promise<void> | null = null;
  let outDir: string | null = args.out ? resolve(args.out) : null;

  const destroyAndSave = (): Promise<void> =>
    (destroying ??= (async () => {
      if (!summary.capsule_id) return;
      progress.stop();
      progress.line('destroying the capsule…');
      destroyed = await client.destroy(summary.capsule_id);
      outDir ??= resolve(`capsule-out-${summary.capsule_id}`);
      await mkdir(outDir, { recursive: true });
      const proof = destroyed.audit_proof;
      summary.proof_path = join(outDir, 'audit-proof.json');
      await writeFile(summary.proof_path, JSON.stringify(proof, null, 2) + '\n');
      const r = verifyProof(proof);
      summary.verified = r.valid;
      summary.verdict = verdictLine(r, proof);
    })());

  const onSigint = () => {
    if (summary.interrupted) return;
    summary.interrupted = true;
    abort.abort();
  };
  process.on('SIGINT', onSigint);
  try {
    let capsulefileId: string | undefined;
    if (args.capsulefile) {
      if (/^cf_/.test(args.capsulefile)) capsulefileId = args.capsulefile;
      else {
        const src = await loadSource(args.capsulefile);
        const cf = await client.createCapsulefile(src.definition as never, { signal: abort.signal });
        for (const f of src.files) {
          await client.addCapsulefileFile(cf.id, f.filename, f.bytes, { signal: abort.signal });
          progress.line(`capsulefile ${f.filename} (${fmtBytes(f.bytes.length)})`);
        }
        capsulefileId = (await client.finalizeCapsulefile(cf.id, { signal: abort.signal })).id;
      }
    }
    const uploads = await Promise.all(
      args.uploads.map(async (p) => {
        if (!(await stat(p).catch(() => null))?.isFile()) throw new Failure(`${p}: not a file`);
        return p;
      }),
    );
    const input = args.input !== undefined ? await readFile(args.input, 'utf8') : undefined;
    const c = await client.createCapsule(
      { ...(args.ttl ? { ttl: args.ttl } : {}), ...(capsulefileId ? { capsulefile_id: capsulefileId } : {}) },
      { signal: abort.signal },
    );
    summary.capsule_id = c.id;
    progress.line(`capsule ${c.id} created`);
    const totalUp = (await Promise.all(uploads.map((p) => stat(p)))).reduce((n, s) => n + s.size, 0);
    let sent = 0;
    for (const p of uploads) {
      const bytes = await readFile(p);
      await client.upload(c.id, basename(p), bytes, { signal: abort.signal });
      sent += bytes.length;
      progress.bar('upload  ', sent, totalUp);
    }
    progress.spin('running');
    const ex: ExecResult = await client.exec(
      c.id,
      {
        ...(args.command.trim() ? { command: args.command } : {}),
        ...(input !== undefined ? { input_data: input } : {}),
      },
      { signal: abort.signal },
    );
    progress.stop();
    Object.assign(summary, {
      exit_code: ex.exit_code,
      timed_out: ex.timed_out,
      duration_ms: ex.duration_ms,
      stdout: ex.stdout,
      stderr: ex.stderr,
    });
    const listed = await client.listOutput(c.id, { signal: abort.signal });
    outDir ??= resolve(`capsule-out-${c.id}`);
    await mkdir(outDir, { recursive: true });
    const total = listed.files.reduce((n, f) => n + f.size_bytes, 0);
    let got = 0;
    for (const f of listed.files) {
      const bytes = await client.download(c.id, f.filename, { signal: abort.signal });
      const path = join(outDir, basename(f.filename));
      await writeFile(path, bytes);
      got += bytes.length;
      progress.bar('download', got, total);
      summary.files.push({ ...f, path });
    }
    await destroyAndSave();
  } catch (e) {
    progress.stop();
    if (!summary.interrupted)
      summary.error =
        e instanceof CapsuleError
          ? `${e.code}: ${e.message}${e.requestId ? ` (request ${e.requestId})` : ''}`
          : e instanceof Error
            ? e.message
            : String(e);
    // The capsule never outlives the run: destroyed and its proof kept, whatever failed.
    await destroyAndSave().catch((err: unknown) => {
      summary.error = `${summary.error ? summary.error + '; ' : ''}destroy failed: ${err instanceof Error ? err.message : String(err)}`;
    });
  } finally {
    process.off('SIGINT', onSigint);
  }
  process.stdout.write(args.json ? JSON.stringify(summary) + '\n' : render(summary));
  if (summary.interrupted) return 130;
  return summary.exit_code === 0 && summary.verified === true && summary.error === null ? 0 : 1;
}
