// `capsule capsulefile hash DIR` and `capsule capsulefile push DIR`.
// hash: reads DIR/Capsulefile.yaml and the files it lists, prints the content
// hash a finalize of exactly these sources produces (docs/CAPSULEFILE.md).
// push: creates the Capsulefile over the API, uploads the files, finalizes,
// and prints "<id> <content_hash>". Exit codes: 0 done, 1 failed, 2 usage.
import { createHash, randomUUID } from 'node:crypto';
import { lstat, readFile, realpath } from 'node:fs/promises';
import { join, sep } from 'node:path';
import {
  CAPSULEFILE_YAML,
  contentHash,
  fileSizeProblem,
  parseCapsulefileYaml,
  type CapsulefileDefinition,
  type CapsulefileFileEntry,
} from '../control-plane/index.js';
import { loadConfig, type Config } from './capsulefile/config.js';

const USAGE = `usage: capsule capsulefile hash DIR
       capsule capsulefile push DIR [--api-url URL] [--api-key KEY]
  push reads CAPSULE_API_URL and CAPSULE_API_KEY; the flags override them.
`;

/** A failure to report in one line (exit 1). */
export class Failure extends Error {}

type LoadedFile = CapsulefileFileEntry & { bytes: Uint8Array };
type Source = { definition: CapsulefileDefinition; files: LoadedFile[] };

/** Reads DIR/Capsulefile.yaml and every listed file; refuses symlinks and anything escaping DIR. */
export async function loadSource(dir: string): Promise<Source> {
  let root: string;
  try {
    root = await realpath(dir);
  } catch {
    throw new Failure(`${dir}: no such directory`);
  }
  let yamlBytes: Uint8Array;
  try {
    yamlBytes = await readFile(join(root, CAPSULEFILE_YAML));
  } catch {
    throw new Failure(`${join(dir, CAPSULEFILE_YAML)}: cannot be read`);
  }
  const { definition, files: names } = parseCapsulefileYaml(yamlBytes);
  const files: LoadedFile[] = [];
  for (const name of names) {
    const path = join(root, name);
    let st;
    try {
      st = await lstat(path);
    } catch {
      throw new Failure(`${name}: listed in ${CAPSULEFILE_YAML} but not found`);
    }
    if (st.isSymbolicLink()) throw new Failure(`${name}: is a symbolic link; list the real file`);
    if (!st.isFile()) throw new Failure(`${name}: is not a regular file`);
    const real = await realpath(path);
    if (!real.startsWith(root + sep)) throw new Failure(`${name}: resolves outside ${dir}`);
    const sizeWhy = fileSizeProblem(st.size);
    if (sizeWhy !== null) throw new Failure(`${name}: ${sizeWhy}`);
    const bytes = await readFile(real);
    const sizeWhyNow = fileSizeProblem(bytes.length);
    if (sizeWhyNow !== null) throw new Failure(`${name}: ${sizeWhyNow}`);
    files.push({
      filename: name,
      size_bytes: bytes.length,
      sha512: `sha512:${createHash('sha512').update(bytes).digest('hex')}`,
      bytes,
    });
  }
  return { definition, files };
}

const entries = (files: readonly LoadedFile[]): CapsulefileFileEntry[] =>
  files.map(({ filename, size_bytes, sha512 }) => ({ filename, size_bytes, sha512 }));

/** Minimal API client: JSON in and out, the SPEC error envelope turned into one line. */
function apiClient(base: URL, apiKey: string) {
  const call = async (
    method: string,
    path: string,
    body?: { json: unknown } | { bytes: Uint8Array },
    idempotent = false,
  ): Promise<Record<string, unknown>> => {
    const headers: Record<string, string> = { authorization: `Bearer ${apiKey}` };
    if (idempotent) headers['idempotency-key'] = randomUUID();
    let payload: string | Uint8Array | undefined;
    if (body && 'json' in body) {
      headers['content-type'] = 'application/json';
      payload = JSON.stringify(body.json);
    } else if (body) {
      headers['content-type'] = 'application/octet-stream';
      payload = body.bytes;
    }
    const url = new URL(path.replace(/^\//, ''), base.href.endsWith('/') ? base.href : `${base.href}/`);
    let res: Response;
    try {
      res = await fetch(url, {
        method,
        headers,
        body: payload as string | Uint8Array<ArrayBuffer> | undefined,
        signal: AbortSignal.timeout(120_000),
      });
    } catch (err) {
      const why = err instanceof Error && err.name === 'TimeoutError' ? 'timed out' : 'could not connect';
      throw new Failure(`${method} ${url.pathname}: ${why} (${url.origin})`);
    }
    const text = await res.text();
    let parsed: unknown = null;
    try {
      parsed = text === '' ? null : JSON.parse(text);
    } catch {
      /* not JSON: reported below */
    }
    if (!res.ok) {
      const e = (parsed as { error?: { code?: unknown; message?: unknown } } | null)?.error;
      const detail = e && typeof e.code === 'string' ? `${e.code}: ${String(e.message ?? '')}` : `HTTP ${res.status}`;
      throw new Failure(`${method} ${url.pathname}: ${res.status} ${detail}`);
    }
    if (res.status === 204) return {};
    if (parsed === null || typeof parsed !== 'object')
      throw new Failure(`${method} ${url.pathname}: the service answered with no JSON body`);
    return parsed as Record<string, unknown>;
  };
  return call;
}

async function push(cfg: Extract<Config, { command: 'push' }>, out: (line: string) => void): Promise<void> {
  const source = await loadSource(cfg.dir);
  const localHash = contentHash(source.definition, entries(source.files));
  const call = apiClient(cfg.apiUrl, cfg.apiKey);
  const created = await call('POST', '/v1/capsulefiles', { json: source.definition }, true);
  const id = created['id'];
  if (typeof id !== 'string' || !/^cf_[A-Za-z0-9_-]+$/.test(id))
    throw new Failure('create answered without a Capsulefile id');
  const base = `/v1/capsulefiles/${encodeURIComponent(id)}`;
  try {
    for (const f of source.files) {
      const up = await call('POST', `${base}/files?filename=${encodeURIComponent(f.filename)}`, { bytes: f.bytes });
      if (up['sha512'] !== f.sha512)
        throw new Failure(`${f.filename}: the service recorded a different SHA-512 than was sent`);
    }
    const fin = await call('POST', `${base}/finalize`, undefined, true);
    if (fin['content_hash'] !== localHash) {
      throw new Failure(
        `finalized ${id}, but its content hash ${String(fin['content_hash'])} differs from the local ${localHash}`,
      );
    }
  } catch (err) {
    // Leave nothing half-way: a draft that failed to upload or finalize is removed.
    if (!(err instanceof Failure && err.message.startsWith('finalized '))) {
      await call('DELETE', base).catch(() => undefined);
    }
    throw err;
  }
  out(`${id} ${localHash}`);
}

export async function main(argv: string[]): Promise<number> {
  let cfg: Config;
  try {
    cfg = loadConfig(argv);
  } catch (err) {
    process.stderr.write(`capsule capsulefile: ${(err as Error).message}\n${USAGE}`);
    return 2;
  }
  const out = (line: string): void => void process.stdout.write(`${line}\n`);
  try {
    if (cfg.command === 'help') {
      process.stdout.write(USAGE);
    } else if (cfg.command === 'hash') {
      const source = await loadSource(cfg.dir);
      out(contentHash(source.definition, entries(source.files)));
    } else {
      await push(cfg, out);
    }
    return 0;
  } catch (err) {
    // One line, never a stack trace: ApiError and Failure messages are written for the user.
    const msg = err instanceof Error ? err.message : String(err);
    process.stderr.write(`capsule capsulefile ${cfg.command}: ${msg.split('\n')[0]}\n`);
    return 1;
  }
}
