// Shared per-proxy state and settings handed to each exchange: limits,
// clock, pools, trust, event sinks. Types and defaults only.
import type { SecureContext } from 'node:tls';
import type { BudgetHold } from './budget.js';
import type { EgressEvent, EgressRefusal } from './events.js';
import type { McpPolicy } from './mcp-policy.js';
import type { Pools } from './upstream.js';

export interface EgressLimits {
  /** TCP + TLS connect to the upstream. */
  connectTimeoutMs: number;
  /** From sending the request to the upstream's complete response headers (slow-loris bound). */
  headersTimeoutMs: number;
  /** Longest silence on the upstream socket once connected. */
  idleTimeoutMs: number;
  /** Whole exchange, streams included. */
  maxExchangeMs: number;
  /** Response bodies above this are refused (declared length) or cut (streamed). */
  maxResponseBytes: number;
  /** Request bodies buffered for MCP inspection up to this size (larger: 413 with an mcp_policy). */
  maxInspectBytes: number;
  /** Bytes one capsule's exchanges may hold at once (inspected bodies, tool result copies); past it: 429. */
  inspectBudgetBytes: number;
  /** Retry-After (seconds) of a 429 for an exhausted inspection budget. */
  inspectRetryAfterS: number;
  /** Response bytes kept to find an MCP tool result. */
  maxMcpResultBytes: number;
  /** Block size for non-SSE streamed responses. */
  streamBlockBytes: number;
  /** Cut an SSE event chunk longer than this. */
  maxSseChunkBytes: number;
  /** An SSE chunk closes at the first event end where it holds at least this many bytes (tiny events share a chunk). */
  minSseChunkBytes: number;
  resolveTimeoutMs: number;
  maxSocketsPerDestination: number;
  /** Events handed to onEvent and not yet settled (its promise); past it events are dropped and an ActivityTruncated says so. */
  maxQueuedEvents: number;
  caValidityHours: number;
}

export const DEFAULT_LIMITS: EgressLimits = {
  connectTimeoutMs: 10_000,
  headersTimeoutMs: 180_000, // non-streaming model APIs can think for minutes
  idleTimeoutMs: 120_000,
  maxExchangeMs: 15 * 60_000,
  maxResponseBytes: 1024 * 1024 * 1024,
  maxInspectBytes: 8 * 1024 * 1024,
  inspectBudgetBytes: 32 * 1024 * 1024,
  inspectRetryAfterS: 2,
  maxMcpResultBytes: 4 * 1024 * 1024,
  streamBlockBytes: 64 * 1024,
  maxSseChunkBytes: 1024 * 1024,
  minSseChunkBytes: 4096,
  resolveTimeoutMs: 5_000,
  maxSocketsPerDestination: 64,
  maxQueuedEvents: 2048,
  caValidityHours: 24,
};

export interface EgressClock {
  /** RFC 3339 UTC, six fraction digits (docs/PROOF_FORMAT.md "Encodings"). */
  nowIso(): string;
  /** Monotonic milliseconds, for durations. */
  monoMs(): number;
}

export interface Runtime {
  mcpPolicy: McpPolicy | undefined;
  limits: EgressLimits;
  pools: Pools;
  trust: SecureContext;
  clock: EgressClock;
  emit(e: EgressEvent): void;
  refuse(r: Omit<EgressRefusal, 'at'>): void;
  nextExchange(): number;
  /** A new hold on the capsule's and the process's inspection budgets. */
  hold(): BudgetHold;
  /** In-flight exchanges; stop() aborts each so their events are emitted before it resolves. */
  inFlight: Set<() => void>;
}

/** Where an admitted request goes: the name the capsule asked for and the one address that was checked. */
export interface Target {
  scheme: 'http' | 'https';
  host: string;
  hostIsIp: boolean;
  port: number;
  /** The checked address, connected to as is. */
  address: string;
}
