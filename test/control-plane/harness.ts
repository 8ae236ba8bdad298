// Test harness: a fresh database per test (unique SQLite file, or a uniquely
// named PostgreSQL database created and dropped here), a control plane on
// port 0, and a small HTTP client. Both drivers run every suite.
import { spawn, type ChildProcess } from 'node:child_process';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { randomBytes } from 'node:crypto';
import pg from 'pg';
import type tap from 'tap';
import { pino } from 'pino';
import { loadConfig, type Config } from '../../control-plane/config.js';
import { startControlPlane, type ControlPlane, type StartOptions } from '../../control-plane/server.js';
import type { RunnerPort } from '../../shared/runner-protocol.js';
import { conformance } from '../helpers/openapi.js';

/** A tap subtest. */
export type T = Parameters<Parameters<typeof tap.test>[0]>[0];

export const PG_ADMIN = 'postgres://postgres@127.0.0.1:5432/test';
export type Driver = 'sqlite' | 'postgresql';
export const DRIVERS: Driver[] = ['sqlite', 'postgresql'];

export interface FreshDb {
  url: string;
  drop(): Promise<void>;
}

/** A database no other test sees: `file:` URL for SQLite, a new PG database. */
export async function freshDb(driver: Driver): Promise<FreshDb> {
  if (driver === 'sqlite') {
    const dir = mkdtempSync(join(tmpdir(), 'cp-test-'));
    return { url: `file:${join(dir, 'capsule.db')}`, drop: async () => rmSync(dir, { recursive: true, force: true }) };
  }
  const name = `cp_test_${process.pid}_${randomBytes(6).toString('hex')}`;
  const admin = new pg.Client({ connectionString: PG_ADMIN });
  await admin.connect();
  try {
    await admin.query(`create database ${name}`);
  } finally {
    await admin.end();
  }
  return {
    url: `postgres://postgres@127.0.0.1:5432/${name}`,
    drop: async () => {
      const c = new pg.Client({ connectionString: PG_ADMIN });
      await c.connect();
      try {
        await c.query(`drop database if exists ${name} with (force)`);
      } finally {
        await c.end();
      }
    },
  };
}

/**
 * Runs one SQL statement directly on a test database (`?` placeholders on both
 * drivers), for checks of what is stored at rest. Rows as objects.
 */
export async function dbQuery(driver: Driver, db: FreshDb, sql: string, params: unknown[] = []): Promise<any[]> {
  if (driver === 'postgresql') {
    const c = new pg.Client({ connectionString: db.url });
    await c.connect();
    try {
      let i = 0;
      return (
        await c.query(
          sql.replace(/\?/g, () => `$${++i}`),
          params,
        )
      ).rows;
    } finally {
      await c.end();
    }
  }
  // The SQLite driver under MikroORM's libsql dialect (better-sqlite3 API); a busy timeout beside the server's writer.
  const { default: Database } = await import('libsql');
  const d = new Database(db.url.replace(/^file:/, ''));
  try {
    d.pragma('busy_timeout = 5000');
    const stmt = d.prepare(sql);
    return stmt.reader ? (stmt.all(...params) as any[]) : (stmt.run(...params), []);
  } finally {
    d.close();
  }
}

/** Writes an operator master key file (0600) into dir, as an operator would, and returns its path. */
export function testMasterKeyFile(dir: string): string {
  const file = join(dir, 'operator-master.key');
  writeFileSync(file, randomBytes(32).toString('base64'), { mode: 0o600 });
  return file;
}

/** A config on `dbUrl` with its own temp data dir (remove `config.dataDir` when done). */
export function testConfig(dbUrl: string, env: Record<string, string> = {}): Config {
  const dataDir = mkdtempSync(join(tmpdir(), 'cp-data-'));
  return loadConfig(
    {
      CAPSULE_DATA_DIR: dataDir,
      LOG_LEVEL: 'silent',
      CAPSULE_MASTER_KEY_FILE: testMasterKeyFile(dataDir),
      // In-process servers are closed with hostile requests still open (slow bodies): a short grace.
      CAPSULE_SHUTDOWN_GRACE_MS: '500',
      ...env,
    },
    { port: 0, databaseUrl: dbUrl, runnerSocket: null },
  );
}

export interface Started {
  cp: ControlPlane;
  api: Api;
  db: FreshDb;
  close(): Promise<void>;
}

export async function start(
  driver: Driver,
  runner: RunnerPort,
  env: Record<string, string> = {},
  db?: FreshDb,
  opts: StartOptions = {},
): Promise<Started> {
  const database = db ?? (await freshDb(driver));
  const config = testConfig(database.url, env);
  const cp = await startControlPlane(config, runner, { logger: pino({ level: 'silent' }), ...opts });
  return {
    cp,
    db: database,
    api: new Api(cp.url),
    close: async () => {
      await cp.close();
      if (!db) await database.drop();
      rmSync(config.dataDir, { recursive: true, force: true });
    },
  };
}

export interface Res {
  status: number;
  headers: Headers;
  text: string;
  body: any;
  bytes: Uint8Array;
}

export class Api {
  constructor(readonly base: string) {}

  async req(
    method: string,
    path: string,
    opts: {
      key?: string;
      json?: unknown;
      raw?: string | Uint8Array;
      headers?: Record<string, string>;
      /**
       * Answers longer than this many bytes are drained unread: no text, no body, no OpenAPI
       * check (the soak's attackers: decoding their 9 MB exec answers took half a core of the
       * node under test).
       */
      readUpTo?: number;
    } = {},
  ): Promise<Res> {
    const headers: Record<string, string> = { ...(opts.headers ?? {}) };
    if (opts.key) headers.authorization = `Bearer ${opts.key}`;
    let body: string | Uint8Array | undefined;
    if (opts.json !== undefined) {
      body = JSON.stringify(opts.json);
      headers['content-type'] ??= 'application/json';
    }
    if (opts.raw !== undefined) body = opts.raw;
    const r = await fetch(this.base + path, { method, headers, ...(body !== undefined ? { body } : {}) });
    if (opts.readUpTo !== undefined && r.body) {
      const chunks: Uint8Array[] = [];
      let n = 0;
      for await (const chunk of r.body) {
        n += chunk.byteLength;
        if (n <= opts.readUpTo) chunks.push(chunk);
        else chunks.length = 0;
      }
      if (n > opts.readUpTo)
        return { status: r.status, headers: r.headers, text: '', body: undefined, bytes: new Uint8Array(0) };
      const small = Buffer.concat(chunks);
      return this.answer(method, path, r, new Uint8Array(small.buffer, small.byteOffset, small.byteLength));
    }
    return this.answer(method, path, r, new Uint8Array(await r.arrayBuffer()));
  }

  /** Decodes, parses and checks an answer against the OpenAPI document. */
  private answer(method: string, path: string, r: Response, bytes: Uint8Array): Res {
    const text = Buffer.from(bytes).toString('utf8');
    let parsed: unknown = undefined;
    try {
      parsed = JSON.parse(text);
    } catch {
      /* raw body */
    }
    // Every answer a suite receives is checked against the OpenAPI document (docs/openapi.yaml).
    const ctype = r.headers.get('content-type');
    const problems = conformance(
      method,
      path,
      r.status,
      ctype?.startsWith('application/json') ? parsed : text,
      ctype,
      false,
    );
    const unknownPath =
      r.status === 404 && problems.length === 1 && problems[0]!.endsWith('not in the OpenAPI document');
    if (problems.length && !unknownPath && !['HEAD', 'OPTIONS'].includes(method.toUpperCase()))
      throw new Error(`response does not match the OpenAPI document: ${problems.join('; ')}`);
    return { status: r.status, headers: r.headers, text, body: parsed, bytes };
  }

  async signup(
    email = `u${randomBytes(5).toString('hex')}@example.com`,
    jurisdiction = 'EU',
  ): Promise<{ key: string; customer_id: string; email: string }> {
    const r = await this.req('POST', '/v1/signup', { json: { email, jurisdiction } });
    if (r.status !== 201) throw new Error(`signup failed: ${r.status} ${r.text}`);
    return { key: r.body.api_key, customer_id: r.body.customer_id, email };
  }
}

/** Asserts the SPEC error envelope and returns it. */
export function envelope(t: T, r: Res, status: number, code: string): Record<string, any> {
  t.equal(r.status, status, `status ${status} (${code}); got ${r.text.slice(0, 200)}`);
  const e = r.body?.error ?? {};
  t.equal(e.code, code, 'error.code');
  t.type(e.type, 'string');
  t.type(e.message, 'string');
  t.match(e.doc_url, new RegExp(`/errors/${code}$`), 'doc_url');
  t.match(e.request_id, /^req_[0-9a-f]+$/, 'request_id');
  t.equal(e.request_id, r.headers.get('x-svc-request-id'), 'request_id equals X-Svc-Request-Id');
  t.notMatch(r.text, /\n\s+at /, 'no stack trace');
  return e;
}

const CLI = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));

export interface ServeProcess {
  child: ChildProcess;
  api: Api;
  stderr: () => string;
  stdout: () => string;
}

/** `capsule serve` as an operator runs it (its own runner), on port 0; resolves once it listens. */
export async function serveProcess(env: NodeJS.ProcessEnv, dataDir: string): Promise<ServeProcess> {
  const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--data-dir', dataDir], {
    env,
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  let out = '';
  child.stderr!.on('data', (b: Buffer) => {
    err += b.toString();
  });
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`serve not ready: ${err}`)), 60_000);
    child.once('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`serve exited ${code}: ${err}`));
    });
    child.stdout!.on('data', (b: Buffer) => {
      out += b.toString();
      const m = /listening on (http:\/\/\S+)/.exec(out);
      if (m?.[1]) {
        clearTimeout(timer);
        resolve(m[1]);
      }
    });
  });
  return { child, api: new Api(url), stderr: () => err, stdout: () => out };
}
