// Public entry of the Capsulefile core (pure: no file, network or database I/O).
export * as limits from './limits.js';
export { checkEgressEntry, type EgressEntryKind, type EgressEntryCheck } from './egress-entry.js';
export { filenameProblem, assertFilename, fileSizeProblem, fileSizeError } from './filename.js';
export {
  DATA_CLASSIFICATIONS,
  PACKAGE_ECOSYSTEMS,
  API_ONLY_FIELDS,
  DEFINITION_FIELDS,
  capsulefileDefinitionSchema,
  capsulefilePatchSchema,
  yamlDefinitionSchema,
  mcpPolicySchema,
  parseDefinition,
  type CapsulefileDefinition,
} from './schema.js';
export { CAPSULEFILE_YAML, parseCapsulefileYaml, yamlError, type CapsulefileSource } from './yaml.js';
export { CONTENT_HASH_FORMAT, canonicalContent, checkFileEntries, contentHash, sha512Hex, type CapsulefileFileEntry } from './content-hash.js';
