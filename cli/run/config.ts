// Where `capsule run` finds the service and the API key: CAPSULE_BASE_URL and
// CAPSULE_API_KEY, else the config file (CAPSULE_CONFIG, default
// ~/.config/capsule/config.json). Never the command line.
import { existsSync, readFileSync, statSync } from 'node:fs';
import { homedir } from 'node:os';
import { join } from 'node:path';

export class ConfigProblem extends Error {}

/** base_url and api_key: environment first, then the config file. */
export function credentials(): { baseUrl: string; apiKey: string } {
  let file: { base_url?: unknown; api_key?: unknown } = {};
  const path = process.env.CAPSULE_CONFIG ?? join(homedir(), '.config/capsule/config.json');
  if (existsSync(path)) {
    if ((statSync(path).mode & 0o077) !== 0)
      process.stderr.write(`capsule run: warning: ${path} is readable by others; chmod 600 it\n`);
    try {
      file = JSON.parse(readFileSync(path, 'utf8'));
    } catch {
      throw new ConfigProblem(`${path}: not valid JSON`);
    }
  }
  const baseUrl = process.env.CAPSULE_BASE_URL ?? (typeof file.base_url === 'string' ? file.base_url : undefined);
  const apiKey = process.env.CAPSULE_API_KEY ?? (typeof file.api_key === 'string' ? file.api_key : undefined);
  if (!baseUrl) throw new ConfigProblem(`no service address: set CAPSULE_BASE_URL or base_url in ${path}`);
  if (!apiKey) throw new ConfigProblem(`no API key: set CAPSULE_API_KEY or api_key in ${path}`);
  return { baseUrl, apiKey };
}
