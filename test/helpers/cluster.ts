// A many-node install on this machine, for the multi-node test and
// `npm run bench:scale`: PostgreSQL, `replicas` `capsule serve` processes and
// `runners` runners, each runner on its own test host (network namespace,
// veth, its own address) over mutual TLS from one operator CA. With `rogue`,
// one more runner whose certificate another CA issued is listed too.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { RunnerClient } from '../../shared/node/runner-client.js';
import { pki } from './cosign-signer.js';
import { startRunner, type StartedRunner } from './runner.js';
import { testHosts } from './netns.js';
import {
  freshDb,
  serveProcess,
  testMasterKeyFile,
  type Api,
  type FreshDb,
  type ServeProcess,
} from '../control-plane/harness.js';

export const RUNNER_PORT = 7443;

export interface ClusterOptions {
  runners: number;
  replicas: number;
  rogue?: boolean;
  /** Extra environment of every replica. */
  env?: Record<string, string>;
}

export interface Cluster {
  db: FreshDb;
  /** The replicas' environment (for `capsule admin` against the same database). */
  env: NodeJS.ProcessEnv;
  replicas: ServeProcess[];
  runners: StartedRunner[];
  /** A direct mutual-TLS client per trusted runner: what each one really holds. */
  direct: RunnerClient[];
  api(i: number): Api;
  /** (Re)starts replica i. */
  serve(i: number): Promise<ServeProcess>;
  close(): Promise<void>;
}

export async function startCluster(o: ClusterOptions): Promise<Cluster> {
  const cleanups: (() => Promise<void> | void)[] = [];
  const close = async (): Promise<void> => {
    for (const c of cleanups.reverse()) await Promise.resolve(c()).catch(() => undefined);
  };
  try {
    const total = o.runners + (o.rogue ? 1 : 0);
    const net = testHosts(total);
    cleanups.push(() => net.remove());
    const dir = mkdtempSync(join(tmpdir(), 'cluster-'));
    cleanups.push(() => rmSync(dir, { recursive: true, force: true }));
    const p = pki(dir);
    p.ca('operator-ca');
    p.ca('other-ca');
    for (const [i, h] of net.hosts.entries())
      p.leaf(
        `runner${i}`,
        i >= o.runners ? 'other-ca' : 'operator-ca',
        `subjectAltName=IP:${h.address}\nextendedKeyUsage=serverAuth\n`,
      );
    p.leaf('control-plane', 'operator-ca', 'extendedKeyUsage=clientAuth\n');
    const runners = await Promise.all(
      net.hosts.map((h, i) =>
        startRunner({
          netns: h.netns,
          options: {
            listen: `${h.address}:${RUNNER_PORT}`,
            tls_ca: p.path('operator-ca.pem'),
            tls_cert: p.path(`runner${i}.pem`),
            tls_key: p.path(`runner${i}.key`),
            node_id: `node-${i}`,
            node_memory_mb: '16384',
          },
        }),
      ),
    );
    cleanups.push(() => Promise.all(runners.map((r) => r.stop().catch(() => undefined))).then(() => undefined));
    const tlsClient = {
      ca: p.read('operator-ca.pem'),
      cert: p.read('control-plane.pem'),
      key: p.read('control-plane.key'),
    };
    const direct = net.hosts
      .slice(0, o.runners)
      .map((h) => new RunnerClient({ host: h.address, port: RUNNER_PORT, ...tlsClient }));
    cleanups.push(() => Promise.all(direct.map((c) => c.close())).then(() => undefined));
    const db = await freshDb('postgresql');
    cleanups.push(() => db.drop());
    const dataDirs = Array.from({ length: o.replicas }, (_, i) => mkdtempSync(join(tmpdir(), `cluster-cp${i}-`)));
    cleanups.push(() => dataDirs.forEach((d) => rmSync(d, { recursive: true, force: true })));
    const env: NodeJS.ProcessEnv = {
      PATH: process.env.PATH,
      DATABASE_URL: db.url,
      CAPSULE_MASTER_KEY_FILE: testMasterKeyFile(dataDirs[0]!),
      CAPSULE_RATE_LIMITS: 'off',
      LOG_LEVEL: 'warn',
      CAPSULE_SHUTDOWN_GRACE_MS: '500',
      CAPSULE_RUNNERS: net.hosts.map((h) => `${h.address}:${RUNNER_PORT}`).join(','),
      CAPSULE_RUNNER_CLIENT_CA_FILE: p.path('operator-ca.pem'),
      CAPSULE_RUNNER_CLIENT_CERT_FILE: p.path('control-plane.pem'),
      CAPSULE_RUNNER_CLIENT_KEY_FILE: p.path('control-plane.key'),
      ...o.env,
    };
    const replicas: ServeProcess[] = [];
    const serve = async (i: number): Promise<ServeProcess> => {
      replicas[i] = await serveProcess(env, dataDirs[i]!);
      return replicas[i];
    };
    cleanups.push(async () => {
      for (const r of replicas) {
        if (r.child.exitCode !== null || r.child.signalCode !== null) continue;
        r.child.kill('SIGTERM');
        await new Promise((res) => r.child.once('exit', res));
      }
    });
    for (let i = 0; i < o.replicas; i++) await serve(i);
    return { db, env, replicas, runners, direct, api: (i) => replicas[i]!.api, serve, close };
  } catch (e) {
    await close();
    throw e;
  }
}
