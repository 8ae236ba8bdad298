// Minimal RFC 8785 (JCS) canonical JSON for hashing MCP tool arguments and
// results and the request canonical form.
// NOTE: local stand-in until shared/proof/jcs.ts lands from the proof-core
// work; swap the import in hashing.ts then. Same rules: keys sorted by UTF-16
// code units, ES2015 number formatting, no whitespace, minimal escaping.

export function jcs(value: unknown): string {
  if (value === null) return 'null';
  switch (typeof value) {
    case 'boolean':
      return value ? 'true' : 'false';
    case 'number':
      if (!Number.isFinite(value)) throw new TypeError('JCS: non-finite number');
      return JSON.stringify(value); // ES2015 Number::toString, as RFC 8785 requires
    case 'string':
      return JSON.stringify(value);
    case 'object': {
      if (Array.isArray(value)) return `[${value.map((v) => jcs(v === undefined ? null : v)).join(',')}]`;
      const obj = value as Record<string, unknown>;
      const keys = Object.keys(obj).filter((k) => obj[k] !== undefined).sort();
      return `{${keys.map((k) => `${JSON.stringify(k)}:${jcs(obj[k])}`).join(',')}}`;
    }
    default:
      throw new TypeError(`JCS: cannot encode ${typeof value}`);
  }
}
