// Reads the regulatory mapping policy file (policies/regulatory-mapping.yaml by default).
import { readFileSync } from 'node:fs';
import { parseRegulatoryMapping, type RegulatoryMapping } from '../service/index.js';

export function loadRegulatoryMapping(path: string): RegulatoryMapping {
  return parseRegulatoryMapping(readFileSync(path, 'utf8'));
}
