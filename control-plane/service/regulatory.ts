// Builds `regulatory_context` from the policy file: a reference map filtered
// by jurisdiction, relationship always `related_to`, never a compliance status.
import { parse } from 'yaml';
import { z } from 'zod';
import type { RegulatoryContext } from '../../shared/proof/index.js';
import { JURISDICTIONS } from '../domain/index.js';

const provision = z.strictObject({ regulation: z.string(), provision: z.string(), description: z.string() });
const file = z.strictObject({
  framework_version: z.string(),
  notice: z
    .string()
    .refine((n) => /not a compliance certification/i.test(n), 'notice must say it is not a compliance certification'),
  steps: z.array(
    z.strictObject({
      step: z.number().int().min(1).max(8),
      subsystem: z.string(),
      provisions: z.partialRecord(z.enum(JURISDICTIONS), z.array(provision)),
    }),
  ),
});
export type RegulatoryMapping = z.infer<typeof file>;

/** Parses and checks the mapping's YAML text (policies/regulatory-mapping.yaml); throws on any deviation. */
export function parseRegulatoryMapping(yamlText: string): RegulatoryMapping {
  return file.parse(parse(yamlText));
}

/**
 * `skipSteps`: steps that did not fully happen (termination.incomplete_steps);
 * a provision is never listed beside a step the proof says did not happen.
 */
export function regulatoryContext(
  map: RegulatoryMapping,
  jurisdiction: string,
  skipSteps: ReadonlySet<number> = new Set(),
): RegulatoryContext {
  const mappings: RegulatoryContext['mappings'] = [];
  for (const s of map.steps) {
    if (skipSteps.has(s.step)) continue;
    const list = s.provisions[jurisdiction as keyof typeof s.provisions] ?? [];
    if (list.length === 0) continue;
    mappings.push({
      step: s.step,
      subsystem: s.subsystem,
      frameworks: list.map((p) => ({
        regulation: p.regulation,
        provision: p.provision,
        description: p.description,
        relationship: 'related_to' as const,
      })),
    });
  }
  return { notice: map.notice, framework_version: map.framework_version, jurisdiction, mappings };
}
