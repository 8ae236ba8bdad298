// Public entry of the Capsulefile core (pure: no file, network or database I/O).
export * as limits from './limits.js';
export { checkEgressEntry, type EgressEntryKind, type EgressEntryCheck } from './egress-entry.js';
export {
  parsePackageSpec,
  satisfies,
  pep503,
  packageKey,
  type Ecosystem,
  type PackageSpec,
  type Constraint,
} from './packages.js';
export { filenameProblem, assertFilename, fileSizeProblem, fileSizeError } from './filename.js';
export {
  DATA_CLASSIFICATIONS,
  PACKAGE_ECOSYSTEMS,
  API_ONLY_FIELDS,
  DEFINITION_FIELDS,
  capsulefileDefinitionSchema,
  yamlDefinitionSchema,
  mcpPolicySchema,
  parseDefinition,
  mergePatch,
  type CapsulefileDefinition,
} from './schema.js';
export { CAPSULEFILE_YAML, parseCapsulefileYaml, yamlError, type CapsulefileSource } from './yaml.js';
export {
  CONTENT_HASH_FORMAT,
  canonicalContent,
  checkFileEntries,
  contentHash,
  sha512Hex,
  type CapsulefileFileEntry,
} from './content-hash.js';
export {
  SYSTEM_OWNER,
  type Capsulefile,
  type CapsulefileStatus,
  type CapsulefilePage,
  type CapsulefileFileBytes,
  type CapsulefileStore,
  type FinalizeFn,
  type DeleteOutcome,
  type BaseImage,
} from './records.js';
