// Capsulefile.yaml: bytes in, a validated definition and file list out. Pure
// (the caller reads the file). Errors are invalid_parameters naming the line
// and the field. Hazards handled here: non-UTF-8 bytes, YAML bombs (anchors
// and aliases are refused outright), tags, duplicate keys, deep nesting,
// unknown fields, and the API-only TLS fields.
import { LineCounter, isAlias, isMap, isPair, isScalar, isSeq, parseDocument, type Document, type Node } from 'yaml';
import { ApiError } from '../../shared/errors.js';
import { filenameProblem } from './filename.js';
import { FILES_MAX, YAML_MAX_BYTES } from './limits.js';
import {
  API_ONLY_FIELDS,
  NOT_WELL_FORMED,
  fieldName,
  firstProblem,
  loneSurrogatePath,
  yamlDefinitionSchema,
  type CapsulefileDefinition,
} from './schema.js';

export const CAPSULEFILE_YAML = 'Capsulefile.yaml';
const MAX_DEPTH = 16;

export type CapsulefileSource = { definition: CapsulefileDefinition; files: string[] };

export function yamlError(line: number | null, field: string | null, why: string, source = CAPSULEFILE_YAML): ApiError {
  const where = line === null ? source : `${source} line ${line}`;
  return new ApiError('invalid_parameters', `${where}: ${field === null ? '' : `${field}: `}${why}`, {
    extra: { field: field ?? source, ...(line === null ? {} : { line }) },
  });
}

/** Byte offset of the first invalid UTF-8 sequence, or -1 (binary search on streaming decodes). */
function firstInvalidUtf8(bytes: Uint8Array): number {
  const ok = (n: number): boolean => {
    try {
      new TextDecoder('utf-8', { fatal: true }).decode(bytes.subarray(0, n), { stream: true });
      return true;
    } catch {
      return false;
    }
  };
  if (ok(bytes.length)) {
    try {
      new TextDecoder('utf-8', { fatal: true }).decode(bytes);
      return -1;
    } catch {
      return Math.max(0, bytes.length - 1); // truncated sequence at the very end
    }
  }
  let lo = 0; // ok(lo) holds
  let hi = bytes.length; // ok(hi) fails
  while (hi - lo > 1) {
    const mid = (lo + hi) >>> 1;
    if (ok(mid)) lo = mid;
    else hi = mid;
  }
  return hi - 1;
}

function lineOfByte(bytes: Uint8Array, offset: number): number {
  let line = 1;
  for (let i = 0; i < offset && i < bytes.length; i++) if (bytes[i] === 0x0a) line++;
  return line;
}

export function parseCapsulefileYaml(bytes: Uint8Array, source = CAPSULEFILE_YAML): CapsulefileSource {
  if (bytes.length > YAML_MAX_BYTES) throw yamlError(null, null, `larger than ${YAML_MAX_BYTES} bytes`, source);
  const bad = firstInvalidUtf8(bytes);
  if (bad >= 0) throw yamlError(lineOfByte(bytes, bad), null, `not valid UTF-8 (byte offset ${bad})`, source);
  let text = new TextDecoder('utf-8').decode(bytes); // strips a leading BOM
  const nul = text.indexOf('\0');
  if (nul >= 0) throw yamlError(text.slice(0, nul).split('\n').length, null, 'contains a NUL character', source);
  if (text.trim() === '') throw yamlError(null, null, 'is empty', source);

  const lineCounter = new LineCounter();
  const lineAt = (offset: number | undefined): number | null =>
    offset === undefined ? null : lineCounter.linePos(offset).line;
  let doc: Document.Parsed;
  try {
    doc = parseDocument(text, {
      lineCounter,
      prettyErrors: false,
      uniqueKeys: false,
      version: '1.2',
      schema: 'core',
      merge: false,
      strict: true,
    });
  } catch {
    throw yamlError(null, null, 'could not be parsed as YAML (too deeply nested?)', source);
  }
  text = '';
  const problem = doc.errors[0] ?? doc.warnings[0];
  if (problem) {
    // The parser's own message may quote the source; keep only its first sentence.
    const first = problem.message.split('\n')[0]?.replace(/ at line \d+, column \d+.*$/, '') ?? problem.code;
    const why =
      problem.code === 'MULTIPLE_DOCS'
        ? 'must hold a single YAML document'
        : /call stack/i.test(first)
          ? 'nested too deeply'
          : `YAML syntax error (${first})`;
    throw yamlError(lineAt(problem.pos[0]), null, why, source);
  }

  const root = doc.contents;
  if (!isMap(root))
    throw yamlError(lineAt(root?.range?.[0]), null, 'the top level must be a mapping of field names to values', source);

  // Structural walk: no aliases, anchors, tags or non-string keys; no duplicate keys; bounded depth.
  const walk = (node: unknown, path: (string | number)[]): void => {
    if (path.length > MAX_DEPTH)
      throw yamlError(lineAt((node as Node | null)?.range?.[0]), fieldName(path, source), 'nested too deeply', source);
    if (isAlias(node))
      throw yamlError(lineAt(node.range?.[0]), fieldName(path, source), 'YAML aliases (*name) are not allowed', source);
    if (!isMap(node) && !isSeq(node) && !isScalar(node)) return; // null value of an empty key
    if (node.anchor)
      throw yamlError(lineAt(node.range?.[0]), fieldName(path, source), 'YAML anchors (&name) are not allowed', source);
    if (node.tag)
      throw yamlError(lineAt(node.range?.[0]), fieldName(path, source), 'YAML tags (!tag) are not allowed', source);
    if (isMap(node)) {
      const seen = new Set<string>();
      for (const pair of node.items) {
        if (!isPair(pair)) continue;
        const key = pair.key;
        if (isAlias(key))
          throw yamlError(
            lineAt(key.range?.[0]),
            fieldName(path, source),
            'YAML aliases (*name) are not allowed',
            source,
          );
        if (!isScalar(key) || typeof key.value !== 'string') {
          throw yamlError(
            lineAt((key as Node | null)?.range?.[0]),
            fieldName(path, source),
            'keys must be plain strings',
            source,
          );
        }
        if (key.anchor || key.tag)
          throw yamlError(
            lineAt(key.range?.[0]),
            fieldName([...path, key.value], source),
            'anchors and tags are not allowed',
            source,
          );
        if (seen.has(key.value))
          throw yamlError(lineAt(key.range?.[0]), fieldName([...path, key.value], source), 'duplicate key', source);
        seen.add(key.value);
        walk(pair.value, [...path, key.value]);
      }
    } else if (isSeq(node)) {
      node.items.forEach((item, i) => walk(item, [...path, i]));
    }
  };
  walk(root, []);

  /** Line of the node at `path`, or of its nearest existing ancestor; keyLine asks for the key itself. */
  const lineOf = (path: (string | number)[], keyLine = false): number | null => {
    if (keyLine && path.length > 0) {
      const parent = path.length === 1 ? root : doc.getIn(path.slice(0, -1), true);
      if (isMap(parent)) {
        const pair = parent.items.find((p) => isScalar(p.key) && p.key.value === path[path.length - 1]);
        const k = pair?.key as Node | undefined;
        if (k?.range) return lineAt(k.range[0]);
      }
    }
    for (let n = path.length; n >= 0; n--) {
      const node = n === 0 ? root : doc.getIn(path.slice(0, n), true);
      if (node && typeof node === 'object' && 'range' in node) {
        const r = (node as Node).range;
        if (r) return lineAt(r[0]);
      }
    }
    return null;
  };

  for (const f of API_ONLY_FIELDS) {
    if (root.has(f))
      throw yamlError(
        lineOf([f], true),
        f,
        'is declarable through the API only (POST /v1/capsulefiles), not in Capsulefile.yaml',
        source,
      );
  }

  const value = doc.toJS({ maxAliasCount: 0 }) as Record<string, unknown>;
  const { files: rawFiles, ...definitionFields } = value;

  const files: string[] = [];
  if (rawFiles !== undefined && rawFiles !== null) {
    if (!Array.isArray(rawFiles))
      throw yamlError(lineOf(['files']), 'files', 'must be a list of relative file paths', source);
    if (rawFiles.length > FILES_MAX) throw yamlError(lineOf(['files']), 'files', `at most ${FILES_MAX} files`, source);
    const seen = new Set<string>();
    rawFiles.forEach((f: unknown, i: number) => {
      if (typeof f !== 'string')
        throw yamlError(lineOf(['files', i]), `files.${i}`, 'must be a file path string', source);
      const why = filenameProblem(f);
      if (why !== null) throw yamlError(lineOf(['files', i]), `files.${i}`, why, source);
      if (seen.has(f)) throw yamlError(lineOf(['files', i]), `files.${i}`, `"${f}" is listed twice`, source);
      seen.add(f);
      files.push(f);
    });
  }

  const r = yamlDefinitionSchema.safeParse(definitionFields);
  if (!r.success) {
    const p = firstProblem(r.error, definitionFields);
    throw yamlError(lineOf(p.path, p.why === 'unknown field'), fieldName(p.path, source), p.why, source);
  }
  const lone = loneSurrogatePath(r.data);
  if (lone) throw yamlError(lineOf(lone), fieldName(lone, source), NOT_WELL_FORMED, source);
  return { definition: r.data, files };
}
