// A control plane in its own OS process for the durability tests (two
// processes on one database; SIGKILL at a chosen moment). Configuration comes
// from the environment exactly as `capsule serve` reads it; the runner is a
// socket nobody listens on (webhooks need none). Prints "ready <url>".
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loadConfig } from '../../control-plane/config.js';
import { startControlPlane } from '../../control-plane/server.js';
import { RunnerClient } from '../../shared/node/runner-client.js';

const config = loadConfig(process.env, {
  port: 0,
  runnerSocket: null,
  ...(process.env.DATABASE_URL ? { databaseUrl: process.env.DATABASE_URL } : {}),
});
const runner = new RunnerClient(join(tmpdir(), `cp-no-runner-child-${process.pid}.sock`));
const cp = await startControlPlane(config, runner);
process.stdout.write(`ready ${cp.url}\n`);
process.on('SIGTERM', () => {
  void cp.close().then(() => process.exit(0));
});
