// Public entry of the control plane (for the CLI and tests).
export { loadConfig, loadConfigFromProcess, ConfigError, type Config, type ConfigOverrides } from './config.js';
export { startControlPlane, type ControlPlane, type StartOptions } from './server.js';
export { setTier, rotateKey, setRunnerDraining, listRunners, migrate, AdminError } from './admin.js';
export { ReconnectingRunner } from './runner/index.js';
export {
  CAPSULEFILE_YAML,
  contentHash,
  fileSizeProblem,
  parseCapsulefileYaml,
  type CapsulefileDefinition,
  type CapsulefileFileEntry,
} from './capsulefile/index.js';
export { openapiDocument, OPERATIONS, type Operation } from './http/openapi.js';
