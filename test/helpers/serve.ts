// `capsule serve` as an operator runs it: a child process with its own runner,
// a fresh SQLite database, its own uid block and cgroup name. For client suites
// (SDKs, `capsule run`, the browser verifier) that talk to a real server.
import { spawn, type ChildProcess } from 'node:child_process';
import { createHash, randomBytes } from 'node:crypto';
import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { testMasterKeyFile } from '../control-plane/harness.js';
import { removeStateDir, reserveUidBlock } from './runner.js';

export const CLI = fileURLToPath(new URL('../../cli/capsule.js', import.meta.url));

export interface Served {
  url: string;
  child: ChildProcess;
  stderr(): string;
  stop(): Promise<void>;
}

export async function serve(env: Record<string, string> = {}): Promise<Served> {
  const dataDir = mkdtempSync(join(tmpdir(), 'cp-serve-'));
  const uids = reserveUidBlock(64);
  const runnerDir = join('/run/capsule-runner', createHash('sha256').update(dataDir).digest('hex').slice(0, 16));
  const child = spawn(process.execPath, [CLI, 'serve', '--port', '0', '--data-dir', dataDir], {
    env: {
      PATH: process.env.PATH,
      DATABASE_URL: `file:${join(dataDir, 'capsule.db')}`,
      CAPSULE_MASTER_KEY_FILE: testMasterKeyFile(dataDir),
      LOG_LEVEL: 'warn',
      CAPSULE_RATE_LIMITS: 'off',
      CAPSULE_RUNNER_UID_BASE: String(uids.base),
      CAPSULE_RUNNER_UID_COUNT: String(uids.count),
      CAPSULE_RUNNER_CGROUP_NAME: `capsule-cltest-${randomBytes(6).toString('hex')}`,
      ...env,
    },
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  let err = '';
  child.stderr!.on('data', (b: Buffer) => {
    err += b.toString();
  });
  const cleanup = () => {
    removeStateDir(runnerDir);
    removeStateDir(dataDir);
    uids.release();
  };
  let url: string;
  try {
    url = await new Promise<string>((resolve, reject) => {
      let out = '';
      const timer = setTimeout(() => reject(new Error(`serve not ready: ${err}`)), 90_000);
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
  } catch (e) {
    child.kill('SIGKILL');
    cleanup();
    throw e;
  }
  child.stdout!.resume();
  return {
    url,
    child,
    stderr: () => err,
    stop: async () => {
      if (child.exitCode === null && child.signalCode === null) {
        const exited = new Promise<void>((r) => child.once('exit', () => r()));
        child.kill('SIGTERM');
        const t = setTimeout(() => child.kill('SIGKILL'), 20_000);
        await exited;
        clearTimeout(t);
      }
      cleanup();
    },
  };
}

/** Signs up on a served instance and returns the API key. */
export async function signupKey(url: string, jurisdiction = 'EU'): Promise<string> {
  const r = await fetch(`${url}/v1/signup`, {
    method: 'POST',
    headers: { 'content-type': 'application/json' },
    body: JSON.stringify({ email: `u${randomBytes(5).toString('hex')}@example.com`, jurisdiction }),
  });
  const b = (await r.json()) as { api_key?: string };
  if (r.status !== 201 || !b.api_key) throw new Error(`signup failed: ${r.status}`);
  return b.api_key;
}
