// Reads the service-published reference Capsulefiles from their source
// directories (policies/system-capsulefiles/<name>/Capsulefile.yaml plus the
// files it lists), with the same parser and rules customers get.
import { lstat, readFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import { CAPSULEFILE_YAML, parseCapsulefileYaml, type CapsulefileDefinition } from '../capsulefile/index.js';

export interface SystemSource {
  definition: CapsulefileDefinition;
  files: { filename: string; bytes: Uint8Array }[];
}

/** Every subdirectory holding a Capsulefile.yaml; a broken one fails the start (it is our own policy data). */
export async function readSystemCapsulefiles(dir: string): Promise<SystemSource[]> {
  let names: string[];
  try {
    names = (await readdir(dir)).sort();
  } catch {
    return [];
  }
  const out: SystemSource[] = [];
  for (const name of names) {
    const sub = join(dir, name);
    if (!(await lstat(sub)).isDirectory()) continue;
    let yaml: Uint8Array;
    try {
      yaml = await readFile(join(sub, CAPSULEFILE_YAML));
    } catch {
      continue;
    }
    const parsed = parseCapsulefileYaml(yaml, `${name}/${CAPSULEFILE_YAML}`);
    const files = [];
    for (const f of parsed.files) {
      const st = await lstat(join(sub, f));
      if (!st.isFile()) throw new Error(`${name}/${f}: not a regular file`);
      files.push({ filename: f, bytes: await readFile(join(sub, f)) });
    }
    out.push({ definition: parsed.definition, files });
  }
  return out;
}
