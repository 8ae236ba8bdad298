// Fixed bounds of a Capsulefile definition and its files. They are product
// decisions documented in docs/CAPSULEFILE.md; tier caps (TTL, memory) apply
// later, when a capsule is created from the Capsulefile.

export const NAME_MAX_CHARS = 128;
export const RUNTIME_MAX_CHARS = 64;
/** Same bound as an exec `command` (SPEC "Limits"): the entrypoint is a shell command. */
export const ENTRYPOINT_MAX_BYTES = 10 * 1024;
export const DEFAULT_TTL_MIN_SECONDS = 1;
export const DEFAULT_TTL_MAX_SECONDS = 24 * 3600;
export const MEMORY_MB_MIN = 16;
export const MEMORY_MB_MAX = 64 * 1024;
export const EGRESS_ENTRIES_MAX = 256;
export const ENV_VARS_MAX = 128;
export const ENV_NAME_MAX_CHARS = 128;
export const ENV_VALUE_MAX_BYTES = 4096;
export const ENV_TOTAL_MAX_BYTES = 64 * 1024;
export const PACKAGES_PER_ECOSYSTEM_MAX = 256;
export const MCP_TOOLS_MAX = 256;
export const MCP_TOOL_NAME_MAX_CHARS = 128;
export const TLS_PINS_MAX = 64;
export const SIGNING_ENDPOINT_MAX_CHARS = 2048;
/** A signing_config public key or CA bundle (PEM); an RSA-4096 key is about 800 characters. */
export const SIGNING_PEM_MAX_CHARS = 16384;

/** A file name inside the Capsulefile (UTF-8 bytes = characters: the charset is ASCII). */
export const FILENAME_MAX_CHARS = 255;
/** 0-byte files are refused (see docs/CAPSULEFILE.md); the upper bound is per file. */
export const FILE_MIN_BYTES = 1;
export const FILE_MAX_BYTES = 16 * 1024 * 1024;
/** The runner mounts at most 256 app files (sandbox-runner: app_files bound). */
export const FILES_MAX = 256;
export const FILES_TOTAL_MAX_BYTES = 64 * 1024 * 1024;

/** Capsulefile.yaml itself. */
export const YAML_MAX_BYTES = 256 * 1024;
