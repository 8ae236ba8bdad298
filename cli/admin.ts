// `capsule admin set-tier --email E --tier T [--data-dir DIR]` and
// `capsule admin rotate-key --email E [--data-dir DIR]`: operator commands
// acting on the configured database (DATABASE_URL or the data dir's SQLite).
// `capsule admin drain NODE`, `undrain NODE` and `runners`: the runner registry (several runners).
import {
  AdminError,
  ConfigError,
  listRunners,
  loadConfigFromProcess,
  migrate,
  rotateKey,
  setRunnerDraining,
  setTier,
} from '../control-plane/index.js';

const USAGE = `usage: capsule admin set-tier --email E --tier T [--data-dir DIR]
       capsule admin rotate-key --email E [--data-dir DIR]
       capsule admin drain NODE | undrain NODE | runners
       capsule admin migrate   (apply the database migrations and exit)
       tiers: free, starter (developer), business (team), enterprise
       rotate-key prints a new live API key and revokes every other key of the account (a lost key)
`;

const REQUIRED: Record<string, string[]> = { 'set-tier': ['email', 'tier'], 'rotate-key': ['email'] };

export async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  if (cmd === '-h' || cmd === '--help') {
    process.stdout.write(USAGE);
    return 0;
  }
  if (cmd === 'drain' || cmd === 'undrain' || cmd === 'runners') return runners(cmd, rest);
  if (cmd === 'migrate') return migrateCmd(rest);
  const required = cmd === undefined ? undefined : REQUIRED[cmd];
  if (!required) {
    process.stderr.write(`capsule admin: unknown command ${JSON.stringify(cmd ?? '')}\n${USAGE}`);
    return 2;
  }
  const opts: Record<string, string> = {};
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i] ?? '';
    const m = /^--(email|tier|data-dir)(?:=(.*))?$/s.exec(a);
    const v = m ? (m[2] ?? rest[++i]) : undefined;
    if (!m || v === undefined || v === '' || (m[1] === 'tier' && cmd !== 'set-tier')) {
      process.stderr.write(`capsule admin: bad option ${JSON.stringify(a)}\n${USAGE}`);
      return 2;
    }
    opts[m[1] ?? ''] = v;
  }
  const missing = required.filter((o) => !opts[o]);
  if (missing.length > 0) {
    process.stderr.write(`capsule admin: ${missing.map((o) => `--${o}`).join(' and ')} required\n${USAGE}`);
    return 2;
  }
  const email = opts.email ?? '';
  return operator(async () => {
    const config = loadConfigFromProcess(opts['data-dir'] ? { dataDir: opts['data-dir'] } : {});
    if (cmd === 'rotate-key') {
      const key = await rotateKey(config, email);
      // The key goes to stdout alone (scriptable); the notice to stderr.
      process.stdout.write(`${key}\n`);
      process.stderr.write(
        `${email.trim().toLowerCase()}: new live key issued, every other key revoked; it is shown once\n`,
      );
      return 0;
    }
    const tier = await setTier(config, email, opts.tier ?? '');
    process.stdout.write(`${email.trim().toLowerCase()}: tier ${tier}\n`);
    return 0;
  });
}

/** Registry commands: drain and undrain take the node id as their one argument; runners lists. */
async function runners(cmd: 'drain' | 'undrain' | 'runners', rest: string[]): Promise<number> {
  const node = rest[0];
  if (cmd === 'runners' ? rest.length !== 0 : rest.length !== 1 || !node || node.startsWith('-')) {
    process.stderr.write(`capsule admin: ${cmd === 'runners' ? 'runners takes no argument' : `${cmd} NODE`}\n${USAGE}`);
    return 2;
  }
  return operator(async () => {
    const config = loadConfigFromProcess({});
    if (cmd === 'runners') {
      for (const n of await listRunners(config)) {
        const state = n.lost_ms !== null ? 'lost' : n.draining ? 'draining' : 'live';
        const c = n.capacity;
        process.stdout.write(
          `${n.node_id}\t${n.address}\t${state}\t${c ? `${c.capsules}/${c.max_capsules} capsules, ${c.free_mb} MB free` : '-'}\theartbeat ${new Date(n.heartbeat_ms).toISOString()}\n`,
        );
      }
      return 0;
    }
    await setRunnerDraining(config, node!, cmd === 'drain');
    process.stdout.write(
      `${node}: ${cmd === 'drain' ? 'draining (no new capsules; live ones run on)' : 'accepting capsules'}\n`,
    );
    return 0;
  });
}

async function migrateCmd(rest: string[]): Promise<number> {
  if (rest.length !== 0) {
    process.stderr.write(`capsule admin: migrate takes no argument\n${USAGE}`);
    return 2;
  }
  return operator(async () => {
    const n = await migrate(loadConfigFromProcess({}));
    process.stdout.write(`database schema up to date (${n} migrations applied)\n`);
    return 0;
  });
}

/** Runs an operator command: its own refusals (AdminError, ConfigError) are one line and exit 1. */
async function operator(f: () => Promise<number>): Promise<number> {
  try {
    return await f();
  } catch (e) {
    if (e instanceof AdminError || e instanceof ConfigError) {
      process.stderr.write(`capsule admin: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
}
