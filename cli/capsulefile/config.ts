// Configuration of `capsule capsulefile`: argv and the environment, read once.
// CAPSULE_API_URL and CAPSULE_API_KEY are read here and nowhere else.

export type Config =
  | { command: 'help' }
  | { command: 'hash'; dir: string }
  | { command: 'push'; dir: string; apiUrl: URL; apiKey: string };

export class UsageError extends Error {}

/** The command's whole configuration, read once from argv and the environment. */
export function parseConfig(argv: readonly string[], env: Readonly<Record<string, string | undefined>>): Config {
  const [command, ...rest] = argv;
  if (command === undefined) throw new UsageError('missing subcommand');
  if (command === '-h' || command === '--help') return { command: 'help' };
  if (command !== 'hash' && command !== 'push') throw new UsageError(`unknown subcommand "${command}"`);
  const positional: string[] = [];
  let apiUrl = env['CAPSULE_API_URL'];
  let apiKey = env['CAPSULE_API_KEY'];
  for (let i = 0; i < rest.length; i++) {
    const a = rest[i] ?? '';
    const [flag, inline] =
      a.startsWith('--') && a.includes('=')
        ? [a.slice(0, a.indexOf('=')), a.slice(a.indexOf('=') + 1)]
        : [a, undefined];
    if (command === 'push' && (flag === '--api-url' || flag === '--api-key')) {
      const v = inline ?? rest[++i];
      if (v === undefined || v === '') throw new UsageError(`${flag} needs a value`);
      if (flag === '--api-url') apiUrl = v;
      else apiKey = v;
    } else if (a === '-h' || a === '--help') {
      return { command: 'help' };
    } else if (a.startsWith('-')) {
      throw new UsageError(`unknown option "${flag}"`);
    } else {
      positional.push(a);
    }
  }
  if (positional.length !== 1) throw new UsageError('expected exactly one DIR');
  const dir = positional[0] as string;
  if (command === 'hash') return { command, dir };
  if (!apiUrl) throw new UsageError('no API address: set CAPSULE_API_URL or pass --api-url');
  if (!apiKey) throw new UsageError('no API key: set CAPSULE_API_KEY or pass --api-key');
  let url: URL;
  try {
    url = new URL(apiUrl);
  } catch {
    throw new UsageError('the API address is not a URL');
  }
  if (url.protocol !== 'https:' && url.protocol !== 'http:')
    throw new UsageError('the API address must be http:// or https://');
  return { command, dir, apiUrl: url, apiKey };
}

/** The command's configuration from the real process environment. */
export const loadConfig = (argv: readonly string[]): Config => parseConfig(argv, process.env);
