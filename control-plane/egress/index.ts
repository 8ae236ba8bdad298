// The egress adapter: starts one sealed egress proxy per capsule
// (egress-proxy's startEgressProxy) on a Unix socket in a directory the
// runner can reach, and hands its events to the caller as they happen.
import { mkdirSync } from 'node:fs';
import { join } from 'node:path';
import {
  ByteBudget,
  checkDeclarationEntry,
  checkMcpPolicy,
  checkRule,
  startEgressProxy,
  type EgressEvent,
  type EgressLimits,
  type EgressRefusal,
  type McpPolicy,
  type Resolver,
  type Rule,
} from '../../egress-proxy/index.js';
import {
  EgressConfigError,
  type EgressActivity,
  type EgressLauncher,
  type EgressSpec,
  type RunningEgress,
} from '../domain/index.js';

export interface ProxyEgressOptions {
  /** Directory for the per-capsule sockets (created 0700). */
  socketDir: string;
  /** Operator's extra upstream trust anchors (CAPSULE_EGRESS_EXTRA_CA, read by config.ts). */
  extraCaPem: string | null;
  /** DNS for upstream names; tests inject one mapping their names to 127.0.0.1. Default: the host resolver. */
  resolver?: Resolver;
  /** Proxy bounds (tests shorten the slow-loris timeout). */
  limits?: Partial<EgressLimits>;
  /** Randomness for certificate serials (the control plane's injected source). */
  random?: (n: number) => Uint8Array;
  /** Refusals (no customer bytes) for operator logs. */
  onRefusal?: (capsuleId: string, r: EgressRefusal) => void;
  /** Memory bounds (the typed config's egressBudgets); test limits override the per-capsule ones. */
  budgets?: { inspectBytesPerCapsule: number; inspectBytesPerProcess: number; maxQueuedEvents: number };
}

export class ProxyEgress implements EgressLauncher {
  /** Inspection bytes held by every capsule's proxy together. */
  readonly processBudget: ByteBudget | null;

  constructor(private readonly o: ProxyEgressOptions) {
    mkdirSync(o.socketDir, { recursive: true, mode: 0o700 });
    this.processBudget = o.budgets ? new ByteBudget(o.budgets.inspectBytesPerProcess) : null;
  }

  async start(spec: EgressSpec, onEvent: (e: EgressActivity) => void | Promise<unknown>): Promise<RunningEgress> {
    // Validate with the proxy's own checkers first, so a bad stored value becomes a 400 naming the field.
    const rules: Rule[] = spec.rules.map((r, i) => {
      const c = checkRule(r);
      if (!c.ok)
        throw new EgressConfigError(`egress_profile_id: rule ${i + 1} cannot be enforced (${c.problem.message})`);
      return c.value;
    });
    spec.declaration.forEach((d, i) => {
      const c = checkDeclarationEntry(d, i);
      if (!c.ok) throw new EgressConfigError(`capsulefile_id: ${c.problem.message}`);
    });
    if (spec.mcpPolicy !== undefined) {
      const m = checkMcpPolicy(spec.mcpPolicy);
      if (!m.ok) throw new EgressConfigError(`capsulefile_id: mcp_policy cannot be enforced (${m.message})`);
    }
    const proxy = await startEgressProxy({
      capsuleId: spec.capsuleId,
      socketPath: join(this.o.socketDir, `${spec.capsuleId}.sock`),
      profileRules: rules,
      declaration: spec.declaration,
      ...(spec.mcpPolicy !== undefined ? { mcpPolicy: spec.mcpPolicy as McpPolicy } : {}),
      ...(this.o.extraCaPem !== null ? { extraCaPem: this.o.extraCaPem } : {}),
      ...(this.o.resolver ? { resolver: this.o.resolver } : {}),
      limits: {
        ...(this.o.budgets
          ? {
              inspectBudgetBytes: this.o.budgets.inspectBytesPerCapsule,
              maxQueuedEvents: this.o.budgets.maxQueuedEvents,
            }
          : {}),
        ...this.o.limits,
      },
      ...(this.processBudget ? { processInspectBudget: this.processBudget } : {}),
      // WARNING: the proxy keeps its own real-time clock: it also dates the capsule CA, which a fake clock would break.
      ...(this.o.random ? { random: this.o.random } : {}),
      onEvent: (e: EgressEvent) => onEvent(e as unknown as EgressActivity),
      onRefusal: (r) => this.o.onRefusal?.(spec.capsuleId, r),
    });
    const socketPath = proxy.socketPath;
    if (socketPath === undefined) {
      await proxy.stop();
      throw new Error('egress proxy started without a socket');
    }
    return {
      proxySocket: socketPath,
      caPem: proxy.caPem,
      stop: async () =>
        ({ ...(await proxy.stop()), dropped_event_callback_errors: proxy.droppedCallbackErrors }) as unknown as Record<
          string,
          unknown
        >,
    };
  }
}
