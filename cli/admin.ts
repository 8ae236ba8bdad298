// `capsule admin set-tier --email E --tier T [--data-dir DIR]`: operator
// commands acting on the configured database (DATABASE_URL or the data dir's SQLite).
import { AdminError, ConfigError, loadConfigFromProcess, setTier } from '../control-plane/index.js';

const USAGE =
  'usage: capsule admin set-tier --email E --tier T [--data-dir DIR]\n       tiers: free, starter (developer), business (team), enterprise\n';

export async function main(argv: string[]): Promise<number> {
  const [cmd, ...rest] = argv;
  if (cmd === '-h' || cmd === '--help') {
    process.stdout.write(USAGE);
    return 0;
  }
  if (cmd !== 'set-tier') {
    process.stderr.write(`capsule admin: unknown command ${JSON.stringify(cmd ?? '')}\n${USAGE}`);
    return 2;
  }
  const opts: Record<string, string> = {};
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i] ?? '';
    const m = /^--(email|tier|data-dir)(?:=(.*))?$/s.exec(a);
    const v = m ? (m[2] ?? rest[++i]) : undefined;
    if (!m || v === undefined || v === '') {
      process.stderr.write(`capsule admin: bad option ${JSON.stringify(a)}\n${USAGE}`);
      return 2;
    }
    opts[m[1] ?? ''] = v;
  }
  if (!opts.email || !opts.tier) {
    process.stderr.write(`capsule admin: --email and --tier are required\n${USAGE}`);
    return 2;
  }
  try {
    const config = loadConfigFromProcess(opts['data-dir'] ? { dataDir: opts['data-dir'] } : {});
    const tier = await setTier(config, opts.email, opts.tier);
    process.stdout.write(`${opts.email.trim().toLowerCase()}: tier ${tier}\n`);
    return 0;
  } catch (e) {
    if (e instanceof AdminError || e instanceof ConfigError) {
      process.stderr.write(`capsule admin: ${e.message}\n`);
      return 1;
    }
    throw e;
  }
}
